package ipcserver

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// fakeTimers stands in for time.AfterFunc on a clock the test moves.
type fakeTimers struct {
	now  time.Time
	due  []time.Time
	fns  []func()
	kick int
}

func (f *fakeTimers) after(d time.Duration, fn func()) {
	f.due = append(f.due, f.now.Add(d))
	f.fns = append(f.fns, fn)
}

// advance moves the clock to t, running the timers due by then.
func (f *fakeTimers) advance(t time.Time) {
	for {
		i := -1
		for j, d := range f.due {
			if !d.After(t) && (i < 0 || d.Before(f.due[i])) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		fn := f.fns[i]
		f.now = f.due[i]
		f.due = append(f.due[:i], f.due[i+1:]...)
		f.fns = append(f.fns[:i], f.fns[i+1:]...)
		fn()
	}
	f.now = t
}

// send plays one SHORT from the checked process k of uid, as handleShort
// does.
func (f *fakeTimers) send(l *shortLimiter, uid uint32, k reclaim.Key) shortStep {
	step := l.look(uid, k, f.now)
	if step == shortCheck {
		l.take(uid, k, f.now, func() { f.kick++ })
	}
	return step
}

func key(pid uint32) reclaim.Key {
	return reclaim.Key{Session: "s", Slot: int(pid % 64), PID: pid, StartTime: uint64(pid) * 7}
}

// A job's 300 attached processes each send a SHORT every millisecond for
// a second: the uid gets one pass per ShortUIDGap, not one per message or
// per process.
func TestShortLimiterPerUID(t *testing.T) {
	f := &fakeTimers{now: time.Unix(1000, 0)}
	l := &shortLimiter{after: f.after}
	start := f.now
	sent := 0
	for ms := 0; ms < 1000; ms++ {
		f.advance(start.Add(time.Duration(ms) * time.Millisecond))
		for p := uint32(0); p < 300; p++ {
			f.send(l, 1000, key(100+p))
			sent++
		}
	}
	f.advance(start.Add(time.Second))
	want := int(time.Second/ShortUIDGap) + 1
	t.Logf("%d SHORTs from 300 processes of one uid in 1 s: %d passes", sent, f.kick)
	if f.kick > want || f.kick < want-1 {
		t.Fatalf("%d passes asked for in 1 s; want %d or %d (one per %v)", f.kick, want-1, want, ShortUIDGap)
	}
}

// A SHORT inside its uid's window is not lost: all those until the
// window ends make one pass, asked for at its end.
func TestShortLimiterFoldsIntoOnePass(t *testing.T) {
	f := &fakeTimers{now: time.Unix(1000, 0)}
	l := &shortLimiter{after: f.after}
	start := f.now
	if step := f.send(l, 7, key(1)); step != shortCheck || f.kick != 1 {
		t.Fatalf("first SHORT: step %d, %d passes; want a pass at once", step, f.kick)
	}
	f.advance(start.Add(30 * time.Millisecond))
	if step := f.send(l, 7, key(2)); step != shortCheck || f.kick != 1 {
		t.Fatalf("SHORT inside the window: step %d, %d passes; want it checked and the pass deferred", step, f.kick)
	}
	for ms := 31; ms < 100; ms++ {
		f.advance(start.Add(time.Duration(ms) * time.Millisecond))
		if step := f.send(l, 7, key(uint32(ms))); step != shortCovered {
			t.Fatalf("SHORT at %d ms: step %d; want covered by the pending pass", ms, step)
		}
	}
	if f.kick != 1 {
		t.Fatalf("%d passes before the window's end; want 1", f.kick)
	}
	f.advance(start.Add(ShortUIDGap))
	if f.kick != 2 {
		t.Fatalf("%d passes at the window's end; want 2 (the deferred one)", f.kick)
	}
	// The next window starts at the deferred pass.
	f.advance(start.Add(ShortUIDGap + 10*time.Millisecond))
	f.send(l, 7, key(500))
	if f.kick != 2 {
		t.Fatalf("%d passes 10 ms after the deferred one; want 2", f.kick)
	}
	f.advance(start.Add(2 * ShortUIDGap))
	if f.kick != 3 {
		t.Fatalf("%d passes; want 3", f.kick)
	}
	// Another uid has its own window.
	f.send(l, 8, key(900))
	if f.kick != 4 {
		t.Fatalf("another uid's SHORT: %d passes; want 4", f.kick)
	}
}

// One process's SHORTs closer than ShortProcessGap are dropped before any
// check; another attachment under the same pid (a new process) is not.
func TestShortLimiterPerProcess(t *testing.T) {
	f := &fakeTimers{now: time.Unix(1000, 0)}
	l := &shortLimiter{after: f.after}
	start := f.now
	f.send(l, 7, key(1))
	f.advance(start.Add(ShortUIDGap)) // the uid's window is open again
	f.advance(start.Add(ShortUIDGap))
	l.take(7, key(1), f.now, func() { f.kick++ })
	f.advance(f.now.Add(ShortProcessGap / 2))
	if step := l.look(7, key(1), f.now); step != shortDrop {
		t.Fatalf("the same process again after %v: step %d; want dropped", ShortProcessGap/2, step)
	}
	other := key(1)
	other.StartTime++
	if step := l.look(7, other, f.now); step == shortDrop {
		t.Fatal("a new process under the same pid was dropped as the old one's excess")
	}
	f.advance(f.now.Add(ShortProcessGap))
	if step := l.look(7, key(1), f.now); step == shortDrop {
		t.Fatalf("the same process after %v: dropped", ShortProcessGap*3/2)
	}
}

// startShortServer is startServerSrv with a counter of the passes the
// server asks for.
func startShortServer(t *testing.T, kicks *atomic.Int64) (string, *session.Manager) {
	t.Helper()
	sock, m, _ := startServerSrv(t, func(o *Options) { o.Short = func() { kicks.Add(1) } })
	return sock, m
}

// A SHORT from a process attached to no session is refused (code 10) and
// asks for no pass, on a connection that stays usable; once the process
// has attached, its SHORT asks for one, and its next one for one more
// (at the end of the uid's window).
func TestShortOnlyFromAttachedProcess(t *testing.T) {
	var kicks atomic.Int64
	sock, m := startShortServer(t, &kicks)
	if _, _, err := m.Create(api.SessionRequest{ID: "s", UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	const uuid = "GPU-00000000-0000-0000-0000-000000000000"
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 100; i++ {
		err := c.Short(uuid)
		var re *ipc.RemoteError
		if !errors.As(err, &re) || re.Code != ipc.CodeNotAttached {
			t.Fatalf("SHORT %d from a process attached to no session: %v; want error code %d", i, err, ipc.CodeNotAttached)
		}
	}
	if _, err := c.Ping([]byte("x")); err != nil {
		t.Fatalf("the connection after refused SHORTs: %v", err)
	}
	if n := kicks.Load(); n != 0 {
		t.Fatalf("refused SHORTs asked for %d audit passes", n)
	}

	a, err := c.Attach("s", "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c2, err := ipc.Dial(sock) // the interceptor sends SHORT on a connection of its own
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Short(uuid); err != nil {
		t.Fatalf("SHORT from the attached process: %v", err)
	}
	if n := kicks.Load(); n != 1 {
		t.Fatalf("the attached process's SHORT asked for %d passes; want 1", n)
	}
	// The process's next SHORT, past its own gap, comes inside the uid's
	// window (or, on a slow machine, after it): one more pass either way.
	time.Sleep(ShortProcessGap)
	if err := c2.Short(uuid); err != nil {
		t.Fatalf("second SHORT: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); kicks.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := kicks.Load(); n != 2 {
		t.Fatalf("two SHORTs of an attached process asked for %d passes; want 2", n)
	}
}

// A refusal found real asks for a pass in its GPU's window, whoever asks:
// not held back by the uid's window, folded with the GPU's other real
// refusals inside ShortGPUGap, each GPU on its own.
func TestShortLimiterRealRefusalPerGPU(t *testing.T) {
	f := &fakeTimers{now: time.Unix(1000, 0)}
	l := &shortLimiter{after: f.after}
	start := f.now
	kick := func() { f.kick++ }
	l.take(7, key(1), f.now, kick) // the uid's window opens
	if f.kick != 1 {
		t.Fatalf("%d passes after the uid's first SHORT; want 1", f.kick)
	}
	f.advance(start.Add(30 * time.Millisecond))
	if !l.takeGPU(0, key(2), f.now, kick) || f.kick != 2 {
		t.Fatalf("a real refusal inside the uid's window: %d passes; want one more at once", f.kick)
	}
	f.advance(start.Add(35 * time.Millisecond))
	if l.takeGPU(0, key(3), f.now, kick) || f.kick != 2 || !l.gpuPending(0) {
		t.Fatalf("a second real refusal on GPU 0 after 5 ms: %d passes, pending %v; want it folded into one at the window's end",
			f.kick, l.gpuPending(0))
	}
	if !l.takeGPU(1, key(4), f.now, kick) || f.kick != 3 {
		t.Fatalf("a real refusal on GPU 1: %d passes; want one more at once", f.kick)
	}
	f.advance(start.Add(30*time.Millisecond + ShortGPUGap))
	if f.kick != 4 || l.gpuPending(0) {
		t.Fatalf("%d passes at the end of GPU 0's window (pending %v); want 4", f.kick, l.gpuPending(0))
	}
	// The uid's own window is where it was: a SHORT not found real waits
	// for its end.
	if l.take(7, key(5), f.now, kick) {
		t.Fatal("a SHORT not found real inside the uid's window asked for a pass at once")
	}
	f.advance(start.Add(ShortUIDGap))
	if f.kick != 5 {
		t.Fatalf("%d passes at the end of the uid's window; want 5", f.kick)
	}
}

// Through the server: an attached process's SHORT asks for a pass in its
// uid's window while the GPU has free what its session may still take;
// once the driver has less free than that (something holds memory
// promised to the session), its next SHORT asks for one at once, in the
// GPU's window, however recent the uid's last pass.
func TestShortRealRefusalAtOnce(t *testing.T) {
	var kicks atomic.Int64
	var free atomic.Uint64
	free.Store(1 << 34)
	sock, m, _ := startServerSrv(t, func(o *Options) {
		o.Short = func() { kicks.Add(1) }
		o.Free = func(i int) (uint64, error) { return free.Load(), nil }
	})
	if _, _, err := m.Create(api.SessionRequest{ID: "s", UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	const uuid = "GPU-00000000-0000-0000-0000-000000000000"
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.Attach("s", "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := c.Short(uuid); err != nil {
		t.Fatalf("SHORT: %v", err)
	}
	if n := kicks.Load(); n != 1 {
		t.Fatalf("the first SHORT asked for %d passes; want 1", n)
	}
	free.Store(512 << 20) // less than the 1 GiB the session may take
	time.Sleep(ShortProcessGap + shortFreeAge)
	if err := c.Short(uuid); err != nil {
		t.Fatalf("SHORT: %v", err)
	}
	if n := kicks.Load(); n != 2 {
		t.Fatalf("a SHORT while the GPU has less free than the session's quota asked for %d passes by its answer; want 2", n)
	}
}
