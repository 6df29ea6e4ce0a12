package compute

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

type fakeSessions struct {
	list []Session
	jobs map[uint32]string
}

func (f *fakeSessions) ComputeSessions() []Session { return f.list }
func (f *fakeSessions) JobOf(pid uint32) string    { return f.jobs[pid] }

type fakeBusy struct{ next map[int]Window }

func (f *fakeBusy) Busy() (map[int]Window, error) { return f.next, nil }

// testPage is a compute page of the test's own.
func testPage(t *testing.T) *Page {
	t.Helper()
	page, err := OpenPage(filepath.Join(t.TempDir(), "compute"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { page.Close() })
	return page
}

func pct(p int) api.Compute { return api.Compute{Mode: api.ComputePercent, Percent: p} }

// pass100 is one GPU's samples covering 100 ms.
func pass100(procs map[uint32]float64) Window { return Window{Procs: procs, Span: 100e6} }

// A pass attributes NVML's per-process time to sessions (attached pids,
// else the kernel's pid->job), holds the one ahead of its share on the
// ledger GPU where it is ahead, and frees the slot of a session that is
// gone. The first pass counts nothing.
func TestControllerPass(t *testing.T) {
	page := testPage(t)
	ss := &fakeSessions{
		list: []Session{
			// "a" is on inventory GPUs 1 and 0 (ledger order), "b" on GPU 0 only
			{ID: "a", GPUs: []int{1, 0}, Limits: []uint64{1, 1}, Spec: pct(25), Pids: []uint32{10}},
			{ID: "b", GPUs: []int{0}, Limits: []uint64{1}, Spec: pct(75), Pids: []uint32{20}},
		},
		jobs: map[uint32]string{11: "a"}, // a process of a that never attached
	}
	src := &fakeBusy{next: map[int]Window{0: pass100(map[uint32]float64{10: 30e6, 11: 20e6, 20: 50e6})}}
	c := &Controller{Page: page, Source: src, Sessions: ss, Physical: []uint64{80, 80}, Interval: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, id := range []string{"a", "b"} {
		if !page.Assign(id) {
			t.Fatalf("no slot for %s", id)
		}
	}
	now := time.Unix(1000, 0)
	// the first pass's samples are what ran before any share (the driver
	// keeps seconds of them): nobody is held for them
	c.Pass(now.Add(-100 * time.Millisecond))
	if got := page.Throttle("a"); got != 0 {
		t.Errorf("a held at the first pass (throttle bits %b) for what ran before it", got)
	}
	c.Pass(now)
	// on GPU 0 a used 50 ms of 100 against a share of 25: held there, which
	// is its ledger GPU 1; b is behind and free
	if got := page.Throttle("a"); got != 1<<1 {
		t.Errorf("a's throttle bits %b, want %b (its ledger GPU 1 = inventory GPU 0)", got, 1<<1)
	}
	if got := page.Throttle("b"); got != 0 {
		t.Errorf("b's throttle bits %b, want 0", got)
	}
	// b's job ends: its slot is freed and a, alone, runs free
	ss.list = ss.list[:1]
	src.next = map[int]Window{0: pass100(map[uint32]float64{10: 100e6})}
	c.Pass(now.Add(100 * time.Millisecond))
	if got := page.Throttle("a"); got != 0 {
		t.Errorf("alone, a's throttle bits are %b", got)
	}
	for _, id := range page.Assigned() {
		if id == "b" {
			t.Error("the slot of a session that is gone was kept")
		}
	}
}

// A session without a share keeps its slot and is never held; a share
// given to it is enforced from the next pass, and a share removed frees
// the session at once (its throttle bits cleared, its slot kept).
func TestControllerShareGivenAndRemoved(t *testing.T) {
	page, err := OpenPage(filepath.Join(t.TempDir(), "compute"))
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	off := api.Compute{Mode: api.ComputeOff}
	ss := &fakeSessions{list: []Session{
		{ID: "a", GPUs: []int{0}, Limits: []uint64{1}, Spec: off, Pids: []uint32{10}},
		{ID: "b", GPUs: []int{0}, Limits: []uint64{1}, Spec: api.Compute{Mode: api.ComputePercent, Percent: 75}, Pids: []uint32{20}},
	}}
	// both launch back to back and the GPU gives each half its time
	src := &fakeBusy{next: map[int]Window{0: pass100(map[uint32]float64{10: 50e6, 20: 50e6})}}
	c := &Controller{Page: page, Source: src, Sessions: ss, Physical: []uint64{80}, Interval: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	now := time.Unix(1000, 0)
	pass := func() {
		now = now.Add(100 * time.Millisecond)
		c.Pass(now)
	}
	slotted := func(id string) bool {
		for _, a := range page.Assigned() {
			if a == id {
				return true
			}
		}
		return false
	}
	pass()
	if !slotted("a") || page.Throttle("a") != 0 {
		t.Fatalf("a session without a share: slot %v, throttle %b; want a slot, never held", slotted("a"), page.Throttle("a"))
	}
	// a is given 25 % and takes half the GPU beside b's 75: it is held
	ss.list[0].Spec = api.Compute{Mode: api.ComputePercent, Percent: 25}
	pass()
	if got := page.Throttle("a"); got != 1 {
		t.Fatalf("a given a share of 25 while it takes 50 %%: throttle %b, want held (1)", got)
	}
	// and the share removed again: free at once, slot kept
	ss.list[0].Spec = off
	pass()
	if got := page.Throttle("a"); got != 0 || !slotted("a") {
		t.Fatalf("a's share removed: throttle %b, slot %v; want free, slot kept", got, slotted("a"))
	}
	// b's removed too: nobody shares, and b runs free
	ss.list[1].Spec = off
	page.SetThrottle("b", 1)
	pass()
	if got := page.Throttle("b"); got != 0 {
		t.Fatalf("no share left: b's throttle %b, want 0", got)
	}
}

// countedSessions counts the passes (each reads the sessions once) and
// lets the test give a share while the controller runs.
type countedSessions struct {
	mu     sync.Mutex
	list   []Session
	passes int
}

func (f *countedSessions) ComputeSessions() []Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes++
	return append([]Session(nil), f.list...)
}
func (f *countedSessions) JobOf(uint32) string { return "" }
func (f *countedSessions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes
}

// While no session has a share the controller waits for its idle interval
// (here an hour) instead of passing every Interval: walking the sessions
// ten times a second for nothing was as much CPU as the audit. A share
// given wakes it, and it passes every Interval again.
func TestControllerIdlesUntilWoken(t *testing.T) {
	page, err := OpenPage(filepath.Join(t.TempDir(), "compute"))
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	ss := &countedSessions{list: []Session{{ID: "a", GPUs: []int{0}, Limits: []uint64{1}, Spec: api.Compute{Mode: api.ComputeOff}}}}
	wake := make(chan struct{}, 1)
	c := &Controller{Page: page, Source: &fakeBusy{}, Sessions: ss, Physical: []uint64{80},
		Interval: 5 * time.Millisecond, IdleInterval: time.Hour, Wake: wake,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitPasses := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ss.count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d passes, want %d", what, ss.count(), n)
			}
		}
	}
	waitPasses(1, "the first pass")
	time.Sleep(200 * time.Millisecond) // forty intervals
	if n := ss.count(); n != 1 {
		t.Fatalf("%d passes in 200 ms with no session sharing, want 1 (the idle interval is an hour)", n)
	}
	ss.mu.Lock()
	ss.list[0].Spec = api.Compute{Mode: api.ComputePercent, Percent: 50}
	ss.mu.Unlock()
	wake <- struct{}{}
	waitPasses(2, "woken by a share")
	waitPasses(6, "passing every Interval while a session shares")
}
