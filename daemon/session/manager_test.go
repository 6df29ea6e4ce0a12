package session

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"golang.org/x/sys/unix"
)

var gpus = []gpu.GPU{
	{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", Name: "A", Physical: 80 << 30},
	{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", Name: "B", Physical: 40 << 30},
}

type fixture struct {
	dir   string
	st    *store.Store
	m     *Manager
	clock atomic.Int64
}

func newFixture(t *testing.T, dir string) *fixture {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	f := &fixture{dir: dir}
	f.clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	f.st = st
	os.MkdirAll(filepath.Join(dir, "ledgers"), 0o700)
	m, err := New(Options{LedgerDir: filepath.Join(dir, "ledgers"), Slots: 4, Overcommit: 1, DefaultTTL: time.Hour,
		HistoryRetention: 24 * time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return time.Unix(0, f.clock.Load()) }}, gpus, st, Events{})
	if err != nil {
		t.Fatal(err)
	}
	go m.Watcher().Run()
	f.m = m
	t.Cleanup(f.close)
	return f
}

func (f *fixture) close() {
	if f.m != nil {
		f.m.Watcher().Close()
		f.m.Close()
		f.st.Close()
		f.m = nil
	}
}

func (f *fixture) advance(d time.Duration) { f.clock.Add(int64(d)) }

// attachChild starts a process (sleep) and attaches it to session id as
// its live process: the process and its slot.
func (f *fixture) attachChild(t *testing.T, id string) (*exec.Cmd, int) {
	t.Helper()
	child := startChild(t, "sleep", "3600")
	at, err := f.m.Attach(id, 0, uint32(child.Process.Pid), nil)
	if err != nil {
		t.Fatal(err)
	}
	at.Close()
	return child, at.Slot
}

func TestSweepRebasesDrift(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "s", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	child, slot := f.attachChild(t, "s")
	// A process killed between "reserve used" and "charge its slot" leaves
	// bytes in used that no slot accounts for.
	l, err := ledger.Open(filepath.Join(f.dir, "ledgers"), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Slot slot+1 was never claimed: no slot accounts for these bytes.
	if err := l.Reserve(slot+1, 0, 4096); err != nil {
		t.Fatal(err)
	}
	v, _ := f.m.Get("s")
	if v.GPUs[0].UsedBytes != 4096 {
		t.Fatalf("setup: used %d, want the 4096 bytes of drift", v.GPUs[0].UsedBytes)
	}
	child.Process.Kill()
	child.Wait()
	f.m.Sweep()
	if v, _ := f.m.Get("s"); v.GPUs[0].UsedBytes != 0 {
		t.Fatalf("used after sweep with no process: %d", v.GPUs[0].UsedBytes)
	}
	if l.Used(0) != 0 {
		t.Fatalf("ledger used after sweep with no process: %d", l.Used(0))
	}
}

// An idle session's ledger is read from the daemon's copy: bytes written
// into it while no process is attached count for nothing, and the first
// process to attach starts from used 0.
func TestIdleLedgerIgnoresStrayCharge(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "s", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(filepath.Join(f.dir, "ledgers"), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reserve(1, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.m.Get("s"); v.GPUs[0].UsedBytes != 0 || len(v.Processes) != 0 {
		t.Fatalf("idle session shows used %d, %d processes", v.GPUs[0].UsedBytes, len(v.Processes))
	}
	f.attachChild(t, "s")
	if l.Used(0) != 0 {
		t.Fatalf("used after the first attach: %d, want 0", l.Used(0))
	}
}

func TestTTLAndPatch(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "a", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	f.advance(50 * time.Minute)
	ttl := int64(3600)
	s, err := f.m.Patch("a", api.PatchRequest{TTLSeconds: &ttl})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(0, f.clock.Load()).Add(time.Hour); !s.Expires.Equal(want) {
		t.Fatalf("expires %v, want %v", s.Expires, want)
	}
	f.advance(30 * time.Minute) // 80 min after creation, 30 after the PATCH
	f.m.Sweep()
	if _, err := f.m.Get("a"); err != nil {
		t.Fatalf("session reaped before its extended TTL: %v", err)
	}
	f.advance(31 * time.Minute)
	f.m.Sweep()
	if _, err := f.m.Get("a"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("session not reaped after its TTL: %v", err)
	}
	rep, err := f.m.History("a")
	if err != nil || rep.Reason != "ttl" {
		t.Fatalf("history %+v, %v", rep, err)
	}
	// History is pruned after history_retention.
	f.advance(25 * time.Hour)
	f.m.Sweep()
	if _, err := f.m.History("a"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("history not pruned: %v", err)
	}
}

func TestTTLRunsFromLastProcess(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "job", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// A child is the job's live process.
	child, _ := f.attachChild(t, "job")
	f.advance(3 * time.Hour) // three TTLs with a process attached
	f.m.Sweep()
	s, err := f.m.Get("job")
	if err != nil {
		t.Fatalf("session in use reaped: %v", err)
	}
	if now := time.Unix(0, f.clock.Load()); !s.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("expires %v, want the TTL from now (%v)", s.Expires, now.Add(time.Hour))
	}
	// The process leaves: the session is idle, and goes one TTL later.
	child.Process.Kill()
	child.Wait()
	f.m.Sweep()
	f.advance(59 * time.Minute)
	f.m.Sweep()
	if _, err := f.m.Get("job"); err != nil {
		t.Fatalf("idle session reaped before its TTL: %v", err)
	}
	f.advance(2 * time.Minute)
	f.m.Sweep()
	if _, err := f.m.Get("job"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("idle session not reaped after its TTL: %v", err)
	}
}

func TestPatchValidation(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "p", QuotaBytes: 1 << 30, GPUs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	big := uint64(81 << 30)
	neg := int64(-1)
	huge := int64(10_000_000_000) // overflows a time.Duration in ns
	tests := []struct {
		name string
		req  api.PatchRequest
		want error
		msg  string
	}{
		{"empty", api.PatchRequest{}, api.ErrBadRequest, "nothing to change"},
		{"gpu not in session", api.PatchRequest{Quotas: map[string]uint64{"1": 1}}, api.ErrBadRequest, "not part of session"},
		{"unknown gpu", api.PatchRequest{Quotas: map[string]uint64{"GPU-x": 1}}, api.ErrBadRequest, "unknown GPU"},
		{"over capacity", api.PatchRequest{QuotaBytes: &big}, api.ErrQuotaExceeded, "80GiB free"},
		{"negative ttl", api.PatchRequest{TTLSeconds: &neg}, api.ErrBadRequest, "ttl_seconds"},
		{"huge ttl", api.PatchRequest{TTLSeconds: &huge}, api.ErrBadRequest, "ttl_seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.m.Patch("p", tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Patch = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
	if v, _ := f.m.Get("p"); v.GPUs[0].LimitBytes != 1<<30 {
		t.Fatalf("refused PATCH changed the limit: %d", v.GPUs[0].LimitBytes)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "q", QuotaBytes: 1 << 30, TTLSeconds: huge}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("Create with ttl_seconds %d = %v, want a bad request", huge, err)
	}
}

func TestRestoreRecreatesCorruptLedgerAndKeepsPeak(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	if _, _, err := f.m.Create(api.SessionRequest{ID: "k", QuotaBytes: 2 << 30}); err != nil {
		t.Fatal(err)
	}
	a, err := f.m.Attach("k", 0, uint32(os.Getpid()), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, ctr := ledger.FilesOf(a.Limits, a.Counters)
	l, err := ledger.Map(lim, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(a.Slot, 0, 1<<30); err != nil {
		t.Fatal(err)
	}
	l.Release(a.Slot, 0, 1<<30)
	l.Close()
	lim.Close()
	ctr.Close()
	f.m.Sweep() // persists the peak
	f.close()

	// Corrupt the ledger and leave an orphan behind, then restart.
	limPath, _ := ledger.Paths(filepath.Join(dir, "ledgers"), "k")
	os.WriteFile(limPath, []byte("garbage"), 0o600)
	orphan, _ := ledger.Paths(filepath.Join(dir, "ledgers"), "orphan")
	os.WriteFile(orphan, []byte("x"), 0o600)

	f2 := newFixture(t, dir)
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	v, err := f2.m.Get("k")
	if err != nil {
		t.Fatal(err)
	}
	if v.GPUs[0].LimitBytes != 2<<30 || v.GPUs[0].UsedBytes != 0 || v.GPUs[0].PeakBytes != 1<<30 {
		t.Fatalf("restored session %+v", v.GPUs[0])
	}
	// A stale file no process maps is removed (a live ledger without a
	// record is left alone: tests/security).
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale ledger file kept: %v", err)
	}
	rep, err := f2.m.Delete("k")
	if err != nil || rep.GPUs[0].PeakBytes != 1<<30 {
		t.Fatalf("report %+v, %v", rep, err)
	}
}

// startChild starts a process the test kills at its end.
func startChild(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// A second ATTACH from the same pid is a new program image only after an
// exec: then what the old image held is given back and counted as
// reclaimed, and the new image starts from an empty slot. The same image
// attaching again keeps its slot and its charge (the memory is still
// allocated).
func TestAttachAgain(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "x", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// The child execs sleep when it reads a line.
	child := exec.Command("bash", "-c", "read x; exec sleep 3600")
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	pid := uint32(child.Process.Pid)
	// Start returns once bash's exec is past its point of no return, not
	// once its stack is placed: an image token read then is 0 (unknown;
	// half the time here), and two unknown tokens left the image after
	// the exec below unproven (a flake). A job's process attaches from its
	// constructors, its stack placed long before.
	waitImage(t, pid, "/bash")
	a, err := f.m.Attach("x", 0, pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	l, err := ledger.Open(filepath.Join(f.dir, "ledgers"), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reserve(a.Slot, 0, 300<<20); err != nil {
		t.Fatal(err)
	}

	b, err := f.m.Attach("x", 0, pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if got := l.Slot(b.Slot); b.Slot != a.Slot || got.PID != pid || got.Used[0] != 300<<20 || l.Used(0) != 300<<20 {
		t.Fatalf("same image attached again: slot %d %+v, used %d; want slot %d still charged 300 MiB", b.Slot, got, l.Used(0), a.Slot)
	}

	in.Write([]byte("go\n"))
	// The exec is done once the new image's stack is placed: its exe link
	// changes before (an attach then reads no image, 0, and keeps the
	// slot as it is); a job's process attaches from its new image's
	// constructors, well after.
	waitImage(t, pid, "/sleep")
	c, err := f.m.Attach("x", 0, pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := l.Slot(c.Slot); got.State != ledger.SlotAttached || got.PID != pid || got.Used[0] != 0 {
		t.Errorf("slot after the attach of the new image: %+v; want attached to %d with nothing charged", got, pid)
	}
	if l.Used(0) != 0 || l.Reclaimed(0) != 300<<20 {
		t.Errorf("used %d, reclaimed %d; want 0 and %d", l.Used(0), l.Reclaimed(0), 300<<20)
	}
	if n := len(l.Attached()); n != 1 {
		t.Errorf("%d attached slots, want 1", n)
	}
}

// waitImage waits until pid runs the program whose path ends in suffix
// with its stack placed (its image token known).
func waitImage(t *testing.T, pid uint32, suffix string) {
	t.Helper()
	for i := 0; ; i++ {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if strings.HasSuffix(exe, suffix) && reclaim.ImageToken(pid) != 0 {
			return
		}
		if i > 500 {
			t.Fatalf("pid %d does not run %s with its stack placed (exe %q)", pid, suffix, exe)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCommittedFollowsSessions checks the committed totals kept as
// sessions come, change and go against a count of the live sessions'
// quotas, and that admission uses them: after every step and after a
// restart.
func TestCommittedFollowsSessions(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	check := func(m *Manager, step string) {
		t.Helper()
		want := make([]uint64, len(gpus))
		n := make([]int, len(gpus))
		for _, s := range m.List() {
			for _, g := range s.GPUs {
				want[g.Index] += g.LimitBytes
				n[g.Index]++
			}
		}
		for _, g := range m.Inventory() {
			if g.CommittedBytes != want[g.Index] || g.Sessions != n[g.Index] {
				t.Fatalf("%s: GPU %d committed %d in %d sessions, the sessions hold %d in %d",
					step, g.Index, g.CommittedBytes, g.Sessions, want[g.Index], n[g.Index])
			}
		}
	}
	mk := func(id string, req api.SessionRequest) {
		t.Helper()
		req.ID = id
		if _, _, err := f.m.Create(req); err != nil {
			t.Fatal(err)
		}
		check(f.m, "create "+id)
	}
	mk("both", api.SessionRequest{QuotaBytes: 10 << 30})
	mk("a-only", api.SessionRequest{GPUs: []string{"0"}, QuotaBytes: 30 << 30})
	mk("b-only", api.SessionRequest{Quotas: map[string]uint64{gpus[1].UUID: 20 << 30}})
	mk("short", api.SessionRequest{QuotaBytes: 1 << 30, TTLSeconds: 60})
	// Again with the same quotas: no new commitment.
	mk("both", api.SessionRequest{QuotaBytes: 10 << 30})

	// GPU 1 (40 GiB) holds 10+20+1 = 31 GiB: 9 GiB fit, 10 do not.
	if _, _, err := f.m.Create(api.SessionRequest{ID: "big", GPUs: []string{"1"}, QuotaBytes: 10 << 30}); !errors.Is(err, api.ErrQuotaExceeded) {
		t.Fatalf("create past the committed capacity: %v", err)
	}
	check(f.m, "refused create")
	q := uint64(2 << 30)
	if _, err := f.m.Patch("both", api.PatchRequest{QuotaBytes: &q}); err != nil {
		t.Fatal(err)
	}
	check(f.m, "patch")
	// The patch gave back 8 GiB on GPU 1: 17 GiB fit now; a patch to the
	// session's own larger quota counts its old quota as free.
	mk("big", api.SessionRequest{GPUs: []string{"1"}, QuotaBytes: 17 << 30})
	q = 22 << 30 // 2 + 22 + 1 + 17 > 40
	if _, err := f.m.Patch("b-only", api.PatchRequest{QuotaBytes: &q}); !errors.Is(err, api.ErrQuotaExceeded) {
		t.Fatalf("patch past the committed capacity: %v", err)
	}
	check(f.m, "refused patch")
	q = 1 << 30
	if _, err := f.m.Patch("b-only", api.PatchRequest{QuotaBytes: &q}); err != nil {
		t.Fatal(err)
	}
	check(f.m, "patch down")
	if _, err := f.m.Delete("a-only"); err != nil {
		t.Fatal(err)
	}
	check(f.m, "delete")
	f.advance(2 * time.Minute)
	f.m.Sweep() // "short" expires
	if _, err := f.m.Get("short"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("short-lived session not reaped: %v", err)
	}
	check(f.m, "ttl release")
	if got := f.m.Inventory()[1].CommittedBytes; got != (2+1+17)<<30 {
		t.Fatalf("GPU 1 committed %d, want 20 GiB", got)
	}
	f.close()

	f2 := newFixture(t, dir)
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	check(f2.m, "restore")
	if got := f2.m.Inventory()[1].CommittedBytes; got != (2+1+17)<<30 {
		t.Fatalf("GPU 1 committed %d after a restart, want 20 GiB", got)
	}
}

// The Attachment an error returns is zero: closing it (a caller that
// defers Close before checking the error) must not close fd 0, 1 or 2.
func TestZeroAttachmentClosesNothing(t *testing.T) {
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			t.Skipf("fd %d is not open in this test process", fd)
		}
	}
	Attachment{}.Close()
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			t.Errorf("fd %d closed by a zero Attachment's Close: %v", fd, err)
		}
	}
}
