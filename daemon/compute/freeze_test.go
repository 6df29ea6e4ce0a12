package compute

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/identity"
)

// recFreezer records what would be frozen.
type recFreezer struct{ frozen map[string]bool }

func (f *recFreezer) Freeze(dir string) error { f.frozen[dir] = true; return nil }
func (f *recFreezer) Thaw(dir string) error   { delete(f.frozen, dir); return nil }

// A session held at its share that keeps using the GPU (its processes
// bypass the gate) is frozen once it has done so for FreezeAfter, in the
// directories of its processes that used the GPU and only those of its
// own job, and thawed on the pass that finds it no longer held; its
// well-behaved neighbour, and a held session that stops launching, are
// never frozen; nothing stays frozen when the controller stops.
func TestControllerFreezesBypass(t *testing.T) {
	page := testPage(t)
	ss := &fakeSessions{
		list: []Session{
			{ID: "cheat", GPUs: []int{0}, Limits: []uint64{1}, Spec: pct(10), Pids: []uint32{10}},
			{ID: "fair", GPUs: []int{0}, Limits: []uint64{1}, Spec: pct(90), Pids: []uint32{20}},
		},
		jobs: map[uint32]string{11: "cheat", 12: "other"}, // 11: cheat's, unpreloaded; 12: in another job's cgroup
	}
	leaf := map[uint32][2]string{10: {"cheat", "/cg/cheat/task_0"}, 11: {"cheat", "/cg/cheat/task_1"},
		12: {"other", "/cg/other/task_0"}, 20: {"fair", "/cg/fair/task_0"}}
	fr := &recFreezer{frozen: map[string]bool{}}
	src := &fakeBusy{}
	c := &Controller{Page: page, Source: src, Sessions: ss, Physical: []uint64{80}, Interval: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Freezer: fr, FreezeAfter: time.Second,
		Leaf: func(pid uint32) (string, string) { return leaf[pid][0], leaf[pid][1] }}
	for _, id := range []string{"cheat", "fair"} {
		page.Assign(id)
	}
	now := time.Unix(1000, 0)
	step := func(procs map[uint32]float64) {
		src.next = map[int]Window{0: pass100(procs)}
		c.Pass(now)
		now = now.Add(100 * time.Millisecond)
	}
	step(nil) // the first pass counts nothing
	// the GPU round-robins between three processes, gate or no gate
	bypass := map[uint32]float64{10: 33e6, 11: 33e6, 20: 34e6}
	var heldAt, frozenAt int
	for i := 1; i <= 30 && frozenAt == 0; i++ {
		step(bypass)
		if heldAt == 0 && page.Throttle("cheat") != 0 {
			heldAt = i
		}
		if len(fr.frozen) > 0 {
			frozenAt = i
		}
	}
	if heldAt == 0 || frozenAt == 0 {
		t.Fatalf("a session held at 10%% that kept taking 66%% was never frozen (held at pass %d)", heldAt)
	}
	if d := time.Duration(frozenAt-heldAt) * 100 * time.Millisecond; d < time.Second || d > 1200*time.Millisecond {
		t.Errorf("frozen %v after it was first held; want FreezeAfter (1s) to a pass more", d)
	}
	got := slices.Sorted(func(yield func(string) bool) {
		for d := range fr.frozen {
			if !yield(d) {
				return
			}
		}
	})
	if want := []string{"/cg/cheat/task_0", "/cg/cheat/task_1"}; !slices.Equal(got, want) {
		t.Errorf("frozen %v, want %v (the cheat's processes' own directories, nothing else)", got, want)
	}
	// frozen, it uses nothing; its neighbour has the GPU until it is owed
	// its share again, and then it is thawed
	thawedAt := 0
	for i := 0; i < 200 && thawedAt == 0; i++ {
		step(map[uint32]float64{20: 100e6})
		if len(fr.frozen) == 0 {
			thawedAt = i + 1
		}
	}
	if thawedAt == 0 {
		t.Fatalf("never thawed after paying its debt")
	}
	t.Logf("held at pass %d, frozen at %d, thawed %d passes later", heldAt, frozenAt, thawedAt)
	if page.Throttle("cheat") != 0 {
		t.Errorf("thawed while still held")
	}
	// a well-behaved held session finishes its queued kernels and stops:
	// never frozen, however long it is held
	ss.list[0].Pids = []uint32{10}
	for i := 0; i < 100; i++ {
		procs := map[uint32]float64{20: 50e6, 10: 50e6}
		if page.Throttle("cheat") != 0 {
			procs = map[uint32]float64{20: 100e6}
			if i%10 == 0 {
				procs = map[uint32]float64{20: 70e6, 10: 30e6} // a few queued kernels
			}
		}
		step(procs)
		if len(fr.frozen) > 0 {
			t.Fatalf("pass %d: a session that stops launching when held was frozen: %v", i, fr.frozen)
		}
	}
	// bypassing again, then gpusliced stops: everything is thawed
	for i := 0; i < 30 && len(fr.frozen) == 0; i++ {
		step(bypass)
	}
	if len(fr.frozen) == 0 {
		t.Fatal("not frozen again")
	}
	c.thawAll()
	if len(fr.frozen) != 0 {
		t.Errorf("still frozen after the controller stopped: %v", fr.frozen)
	}
	// frozen again, then the session ends: thawed on the next pass
	for i := 0; i < 30 && len(fr.frozen) == 0; i++ {
		step(bypass)
	}
	ss.list = ss.list[1:]
	step(map[uint32]float64{20: 100e6})
	if len(fr.frozen) != 0 {
		t.Errorf("still frozen after its session ended: %v", fr.frozen)
	}
}

// CgroupFreezer records each directory before freezing it, and what a
// gpusliced that died left recorded is thawed by the next one. It writes
// nothing outside its root.
func TestCgroupFreezerRecover(t *testing.T) {
	root := t.TempDir()
	rec := filepath.Join(t.TempDir(), "frozen")
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0o644) // as a cgroup has it
	}
	f := &CgroupFreezer{Root: root, Record: rec}
	for _, d := range []string{a, b} {
		if err := f.Freeze(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Freeze("/etc"); err == nil {
		t.Error("froze a directory outside its root")
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
	if got := read(rec); got != a+"\n"+b {
		t.Errorf("record %q, want both directories", got)
	}
	// the daemon dies; the next one thaws both
	g := &CgroupFreezer{Root: root, Record: rec}
	thawed, err := g.Recover()
	if err != nil || len(thawed) != 2 {
		t.Fatalf("Recover = %v, %v", thawed, err)
	}
	for _, d := range []string{a, b} {
		if got := read(filepath.Join(d, "cgroup.freeze")); got != "0" {
			t.Errorf("%s: cgroup.freeze %q after Recover", d, got)
		}
	}
	if got := read(rec); got != "" {
		t.Errorf("record %q after Recover, want empty", got)
	}
}

// On the kernel's cgroup v2: a directory the freezer froze stops its
// processes, and thawing it never resumes a job Slurm suspended (Slurm
// freezes the step's "user" directory above the tasks; the freezer only
// ever writes the task's own).
func TestCgroupFreezerKernel(t *testing.T) {
	root := filepath.Join("/sys/fs/cgroup", identity.V2Dir("/sys/fs/cgroup"))
	if os.Getuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	user := filepath.Join(root, fmt.Sprintf("gpuslice-freezetest-%d", os.Getpid()))
	task := filepath.Join(user, "task_0")
	if err := os.MkdirAll(task, 0o755); err != nil {
		t.Skipf("no writable cgroup v2 hierarchy: %v", err)
	}
	sleep := exec.Command("sleep", "600")
	fd, err := unix.Open(task, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(user, "cgroup.freeze"), []byte("0"), 0)
		sleep.Process.Kill()
		sleep.Wait()
		for range 50 {
			if os.Remove(task) == nil || !errors.Is(os.Remove(task), unix.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		os.Remove(user)
	})
	frozen := func(dir string) bool {
		for range 100 { // the kernel settles the state asynchronously
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			if strings.Contains(string(b), "frozen 1") {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	f := &CgroupFreezer{Root: root, Record: filepath.Join(t.TempDir(), "frozen")}
	if err := f.Freeze(task); err != nil {
		t.Fatal(err)
	}
	if !frozen(task) {
		t.Fatal("the task's directory did not freeze")
	}
	// Slurm suspends the job meanwhile; the share then thaws the task
	if err := os.WriteFile(filepath.Join(user, "cgroup.freeze"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Thaw(task); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if !frozen(task) {
		t.Error("thawing the task's directory resumed a job Slurm had suspended")
	}
	os.WriteFile(filepath.Join(user, "cgroup.freeze"), []byte("0"), 0) // Slurm resumes it
	for i := 0; ; i++ {
		b, _ := os.ReadFile(filepath.Join(task, "cgroup.events"))
		if strings.Contains(string(b), "frozen 0") {
			break
		}
		if i == 100 {
			t.Fatalf("still frozen after Slurm resumed the job and the share thawed it: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A job of weight 2 beside one of 98 that launches past the gate but
// paces itself just under a tenth of the GPU (8 %: four times its share)
// is frozen as one taking the whole GPU is: what a held session may be
// seen using is its own part, not a tenth of the GPU whatever its share.
// The same job launching through the gate, held for long while it pays
// back what it took, finishes its queued kernels and is never frozen.
func TestControllerFreezesPacedBypassOfSmallShare(t *testing.T) {
	run := func(t *testing.T, cheatUse func(held bool, pass int) float64) (frozenAt int) {
		page := testPage(t)
		ss := &fakeSessions{list: []Session{
			{ID: "small", GPUs: []int{0}, Limits: []uint64{1}, Spec: pct(2), Pids: []uint32{10}},
			{ID: "big", GPUs: []int{0}, Limits: []uint64{1}, Spec: pct(98), Pids: []uint32{20}},
		}}
		leaf := map[uint32][2]string{10: {"small", "/cg/small/task_0"}, 20: {"big", "/cg/big/task_0"}}
		fr := &recFreezer{frozen: map[string]bool{}}
		src := &fakeBusy{}
		c := &Controller{Page: page, Source: src, Sessions: ss, Physical: []uint64{80}, Interval: 100 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Freezer: fr, FreezeAfter: 2 * time.Second,
			Leaf: func(pid uint32) (string, string) { return leaf[pid][0], leaf[pid][1] }}
		page.Assign("small")
		page.Assign("big")
		now := time.Unix(1000, 0)
		for i := 0; i < 100; i++ {
			u := cheatUse(page.Throttle("small") != 0, i)
			src.next = map[int]Window{0: pass100(map[uint32]float64{10: u, 20: 100e6 - u})}
			c.Pass(now)
			now = now.Add(100 * time.Millisecond)
			if fr.frozen["/cg/big/task_0"] {
				t.Fatalf("pass %d: the job launching through the gate at weight 98 was frozen", i)
			}
			if fr.frozen["/cg/small/task_0"] {
				return i
			}
		}
		return 0
	}
	t.Run("paced past the gate", func(t *testing.T) {
		if at := run(t, func(bool, int) float64 { return 8e6 }); at == 0 {
			t.Fatal("a job of weight 2 taking 8 % of the GPU past the gate was never frozen")
		}
	})
	t.Run("through the gate", func(t *testing.T) {
		drain := 0
		at := run(t, func(held bool, i int) float64 {
			if !held {
				drain = 0
				return 50e6 // round robin with the other job's process
			}
			drain++
			if drain <= 2 {
				return 30e6 // its queued kernels finish
			}
			return 0
		})
		if at != 0 {
			t.Fatalf("pass %d: a job of weight 2 held at the gate, finishing its queued kernels, was frozen", at)
		}
	})
}
