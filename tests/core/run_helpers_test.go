package core

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// runDaemon is gpusliced for the `gpuslice run` tests: a fast audit (a
// process over a session's quota is stopped within a pass of 50 ms).
func runDaemon(t *testing.T) *testenv.Daemon {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the gpuslice run tests make cgroups and must run as root (CI does)")
	}
	return testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--audit-interval", "50ms"}})
}

// gsRunCmd is `gpuslice run ARGS...` against d with the interceptor, in a
// process group of its own (so a test can signal it with its command, as
// a terminal's Ctrl-C or `timeout` does).
func gsRunCmd(t *testing.T, d *testenv.Daemon, args ...string) *exec.Cmd {
	t.Helper()
	bin := testenv.Artifact(t, "bin/gpuslice")
	c := exec.Command(bin, append([]string{"--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock, "run"}, args...)...)
	c.Env = append(d.Env(), "GPUSLICE_PRELOAD="+probe.Lib(t), "TARGET_APP="+example(t, "target_app"))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for i, a := range args[:max(len(args)-1, 0)] {
		if a == "--id" {
			t.Cleanup(func() { dropCgroup(runCgroup(args[i+1])) })
		}
	}
	return c
}

// dropCgroup kills what is left in a run's cgroup and removes it, so a
// test that failed leaves nothing to the next.
func dropCgroup(dir string) {
	if !exists(dir) {
		return
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for i := 0; i < 500 && exists(dir) && os.Remove(dir) != nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// runProc is a running `gpuslice run`: its command's stdout line by line,
// its stdin, and its own stderr.
type runProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{} // gpuslice run has exited
	copied chan struct{} // its stderr is read to the end
}

func (p *runProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

// Stderr is what gpuslice run and its command wrote on stderr so far.
func (p *runProc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func startRun(t *testing.T, c *exec.Cmd) *runProc {
	t.Helper()
	p := &runProc{cmd: c, done: make(chan struct{}), copied: make(chan struct{})}
	var err error
	if p.stdin, err = c.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	// A pipe of its own: a process the command leaves behind may hold
	// its end open after the run has exited.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(pr)
	c.Stdout, c.Stderr = pw, ew
	err = c.Start()
	pw.Close()
	ew.Close()
	if err != nil {
		pr.Close()
		er.Close()
		t.Fatal(err)
	}
	go func() {
		io.Copy(p, er)
		close(p.copied)
	}()
	go func() {
		c.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		p.stdin.Close()
		<-p.done
		pr.Close()
		er.Close()
	})
	return p
}

// line is the command's next stdout line (the test fails at EOF).
func (p *runProc) line(t *testing.T) string {
	t.Helper()
	l, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("gpuslice run's command ended before its line (%v): read %q\nstderr: %s", err, l, p.Stderr())
	}
	return strings.TrimSpace(l)
}

// ready reads the command's "ready PID" line and returns the process
// that PID names (its start time, which tells it from a later process
// given the same pid).
func (p *runProc) ready(t *testing.T) proc {
	t.Helper()
	l := p.line(t)
	f := strings.Fields(l)
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("command said %q, want \"ready PID\"", l)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("command said %q: %v", l, err)
	}
	st, err := reclaim.StartTime(uint32(pid))
	if err != nil {
		t.Fatalf("process %d of the command: %v", pid, err)
	}
	pr := proc{pid: uint32(pid), start: st}
	t.Cleanup(func() {
		if pr.alive() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pr
}

// wait waits for gpuslice run to exit and returns its exit status (the
// test fails if it still runs after a minute: it hangs).
func (p *runProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("gpuslice run did not exit\nstderr: %s", p.Stderr())
	}
	// What it wrote is read in a moment; a process its command left
	// behind may keep the pipe open longer.
	select {
	case <-p.copied:
	case <-time.After(2 * time.Second):
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// proc is one process, by pid and start time.
type proc struct {
	pid   uint32
	start uint64
}

// alive: the process runs (a zombie has exited).
func (p proc) alive() bool { return reclaim.Alive(p.pid, p.start) }

// runCgroup is the cgroup `gpuslice run --id id` starts its command in.
func runCgroup(id string) string {
	root := "/sys/fs/cgroup"
	return filepath.Join(root, identity.V2Dir(root), identity.RunCgroupPrefix+id)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// released checks that session id is released (not live, its report in
// the history) and returns the report.
func released(t *testing.T, d *testenv.Daemon, id string) *client.Report {
	t.Helper()
	if s, err := d.Client().GetSession(ctx(t), id); err == nil {
		t.Fatalf("session %s still live: %d process(es), %d bytes used", id, len(s.Processes), s.GPUs[0].UsedBytes)
	}
	rep, err := d.Client().History(ctx(t), id)
	if err != nil {
		t.Fatalf("no report of session %s: %v", id, err)
	}
	return rep
}
