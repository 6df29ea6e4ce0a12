package reclaim

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStartTime(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want uint64
		err  bool
	}{
		{"plain", "42 (sleep) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10", 123456, false},
		{"spaces and parens in name", "42 (a b) (c)) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987 1000 10", 987, false},
		{"too short", "42 (x) S 1 2 3", 0, true},
		{"no name", "42 x S", 0, true},
		{"not a number", "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 abc 1000", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStartTime([]byte(tc.stat))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("parseStartTime = %d, %v; want %d (err %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestStartTimeAndAlive(t *testing.T) {
	st, err := StartTime(uint32(os.Getpid()))
	if err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	if !Alive(uint32(os.Getpid()), st) {
		t.Fatal("Alive(self) = false")
	}
	if Alive(uint32(os.Getpid()), st+1) {
		t.Fatal("Alive with another start time = true (pid reuse not detected)")
	}
}

// TestWatcher runs the watcher as the daemon does (its epoll set waited
// for in Go's poller) and as it must when the poller cannot take the set
// (a blocking epoll_wait).
func TestWatcher(t *testing.T) {
	t.Run("poller", func(t *testing.T) { testWatcher(t, true) })
	t.Run("epoll_wait", func(t *testing.T) { testWatcher(t, false) })
}

func testWatcher(t *testing.T, polled bool) {
	exits := make(chan Key, 4)
	w, err := NewWatcher(func(k Key) { exits <- k })
	if err != nil {
		t.Fatal(err)
	}
	if !w.polled {
		t.Fatal("Go's poller did not take the watcher's epoll set")
	}
	w.polled = polled
	go w.Run()
	defer w.Close()

	start := func() (*exec.Cmd, Key) {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		st, err := StartTime(uint32(cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return cmd, Key{Session: "s", Slot: 1, PID: uint32(cmd.Process.Pid), StartTime: st}
	}
	cmd, k := start()
	if err := w.Add(k); err != nil {
		t.Fatal(err)
	}
	if w.Len() != 1 {
		t.Fatalf("Len = %d", w.Len())
	}
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case got := <-exits:
		if got != k {
			t.Fatalf("exit of %+v, want %+v", got, k)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit event")
	}
	if w.Len() != 0 {
		t.Fatalf("Len after exit = %d", w.Len())
	}
	// A removed process is not reported.
	cmd2, k2 := start()
	if err := w.Add(k2); err != nil {
		t.Fatal(err)
	}
	w.Remove(k2)
	cmd2.Process.Kill()
	cmd2.Wait()
	select {
	case got := <-exits:
		t.Fatalf("exit reported for a removed process: %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
	// A dead or reused pid is refused.
	if err := w.Add(k2); err != ErrGone {
		t.Fatalf("Add(dead) = %v, want ErrGone", err)
	}
	self, _ := StartTime(uint32(os.Getpid()))
	if err := w.Add(Key{PID: uint32(os.Getpid()), StartTime: self + 1}); err != ErrGone {
		t.Fatalf("Add(reused pid) = %v, want ErrGone", err)
	}
}

func TestAliveZombieAndGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	st, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(pid, st) {
		t.Fatal("Alive(running child) = false")
	}
	// Killed but not yet waited for: a zombie, whose memory is gone.
	cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for Alive(pid, st) {
		if time.Now().After(deadline) {
			t.Fatal("Alive(zombie) stays true")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if state, _, err := procStat(pid); err != nil || state != 'Z' {
		t.Fatalf("setup: child state %q, %v; want a zombie", state, err)
	}
	cmd.Wait()
	if Alive(pid, st) {
		t.Fatal("Alive(reaped child) = true")
	}
}

// OpenProc reads a live process's parent, start time and image through a
// pidfd; a process that has exited, reaped or not, is ErrGone (its stat
// line may still be there, a zombie's, but its pidfd is readable).
func TestOpenProc(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := uint32(cmd.Process.Pid)
	// Until the child's exec has placed the new stack its image is
	// unknown (0): wait for the program image first.
	for deadline := time.Now().Add(20 * time.Second); ImageToken(pid) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("setup: the child's image stays unknown")
		}
	}
	fd, p, err := OpenProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	st, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if p.PPID != uint32(os.Getpid()) || p.Start != st || p.Image == 0 || p.Image != ImageToken(pid) {
		t.Fatalf("OpenProc = %+v; want ppid %d, start %d, image %d", p, os.Getpid(), st, ImageToken(pid))
	}
	cmd.Process.Kill()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if state, _, err := procStat(pid); err == nil && state == 'Z' {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("setup: child state %q, %v; want a zombie", state, err)
		}
	}
	if fd, _, err := OpenProc(pid); !errors.Is(err, ErrGone) {
		t.Fatalf("OpenProc(zombie) = %d, %v; want ErrGone", fd, err)
	}
	cmd.Wait()
	if fd, _, err := OpenProc(pid); !errors.Is(err, ErrGone) {
		t.Fatalf("OpenProc(reaped) = %d, %v; want ErrGone", fd, err)
	}
}

// Exited answers from a watched process's pidfd: not while the process
// runs, nor while its main thread is a zombie but another thread runs
// More exits at once than Run takes in one go (64): every one is
// delivered, none waits for a later exit (the poller reports the set's
// readiness once; Run takes what is ready until nothing is).
func TestWatcherManyExits(t *testing.T) {
	const n = 150
	exits := make(chan Key, n)
	w, err := NewWatcher(func(k Key) { exits <- k })
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		st, err := StartTime(uint32(cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(Key{Session: "s", Slot: i, PID: uint32(cmd.Process.Pid), StartTime: st}); err != nil {
			t.Fatal(err)
		}
	}
	// Every process exits before Run starts: all n are ready at once.
	for _, cmd := range cmds {
		cmd.Process.Kill()
		cmd.Wait()
	}
	go w.Run()
	defer w.Close()
	seen := map[int]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < n {
		select {
		case k := <-exits:
			seen[k.Slot] = true
		case <-deadline:
			t.Fatalf("%d of %d exits delivered", len(seen), n)
		}
	}
}

// (Alive's answer too), and yes once every thread is gone, reaped or not.
// An unwatched key is not known.
func TestWatcherExited(t *testing.T) {
	w, err := NewWatcher(func(Key) {})
	if err != nil {
		t.Fatal(err)
	}
	// No Run until the end: the exit stays in the pidfd for Exited to
	// find (Close waits for Run).
	defer func() {
		go w.Run()
		w.Close()
	}()
	watch := func(cmd *exec.Cmd) Key {
		t.Helper()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		st, err := StartTime(uint32(cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		k := Key{Session: "s", Slot: 1, PID: uint32(cmd.Process.Pid), StartTime: st}
		if err := w.Add(k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	if _, known := w.Exited(Key{Session: "s", PID: uint32(os.Getpid())}); known {
		t.Fatal("Exited of an unwatched process is known")
	}
	// The main thread exits, a second thread keeps the process; then
	// SIGKILL ends it.
	leader := exec.Command("/usr/bin/python3", "-c", `
import ctypes, threading, time
threading.Thread(target=lambda: time.sleep(3600)).start()
ctypes.CDLL(None).pthread_exit(None)
`)
	k := watch(leader)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if state, _, err := procStat(k.PID); err == nil && state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("setup: the main thread did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if exited, known := w.Exited(k); !known || exited {
		t.Fatalf("Exited(zombie leader, live thread) = %v, %v; want false, true", exited, known)
	}
	if !Alive(k.PID, k.StartTime) {
		t.Fatal("setup: Alive(zombie leader, live thread) = false")
	}
	leader.Process.Kill()
	for {
		if exited, known := w.Exited(k); known && exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Exited stays false after the last thread ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if Alive(k.PID, k.StartTime) {
		t.Fatal("Alive disagrees: true for an exited process")
	}
	leader.Wait()
	if exited, known := w.Exited(k); !known || !exited {
		t.Fatalf("Exited(reaped) = %v, %v; want true, true", exited, known)
	}
	w.Remove(k)
	if _, known := w.Exited(k); known {
		t.Fatal("Exited of a removed key is known")
	}
}
