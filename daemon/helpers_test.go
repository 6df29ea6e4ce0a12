package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestMain doubles as a child process: with GPUSLICE_TEST_CHILD=attach the
// test binary attaches to GPUSLICE_SESSION through the Go IPC client,
// charges GPUSLICE_TEST_BYTES on ledger GPU 0, prints "READY <slot>" and
// waits for stdin to close.
func TestMain(m *testing.M) {
	if os.Getenv("GPUSLICE_TEST_CHILD") == "attach" {
		os.Exit(childAttach())
	}
	os.Exit(m.Run())
}

func childAttach() int {
	c, err := ipc.Dial(os.Getenv("GPUSLICE_IPC_SOCK"))
	if err != nil {
		fmt.Println("ERR dial", err)
		return 3
	}
	a, err := c.Attach(os.Getenv("GPUSLICE_SESSION"), os.Getenv("GPUSLICE_IPC_TOKEN"))
	if err != nil {
		var re *ipc.RemoteError
		if errors.As(err, &re) {
			fmt.Printf("ERR %d %s\n", re.Code, re.Message)
		} else {
			fmt.Println("ERR", err)
		}
		return 3
	}
	l, err := ledger.Map(a.Limits, a.Counters)
	if err != nil {
		fmt.Println("ERR map", err)
		return 3
	}
	n, _ := strconv.ParseUint(os.Getenv("GPUSLICE_TEST_BYTES"), 10, 64)
	if n > 0 {
		if err := l.Reserve(int(a.Slot), 0, n); err != nil {
			fmt.Println("ERR reserve", err)
			return 3
		}
	}
	fmt.Printf("READY %d\n", a.Slot)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "detach":
			if err := c.Detach(a.Slot); err != nil {
				fmt.Println("ERR detach", err)
			} else {
				fmt.Println("DETACHED")
			}
		}
	}
	return 0
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	Slot  int
	done  chan struct{}
}

// childBinary copies the test binary where any uid can run it.
func childBinary(t *testing.T, d *testenv.Daemon) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(d.Dir, "child")
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// startChild starts an attaching child. With wantErr it returns the child's
// error line instead of failing.
func startChild(t *testing.T, d *testenv.Daemon, session string, bytes uint64, uid int, env ...string) (*child, string) {
	t.Helper()
	cmd := exec.Command(childBinary(t, d))
	cmd.Env = append(d.Env(), "GPUSLICE_TEST_CHILD=attach", "GPUSLICE_SESSION="+session,
		"GPUSLICE_TEST_BYTES="+strconv.FormatUint(bytes, 10))
	cmd.Env = append(cmd.Env, env...)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), done: make(chan struct{})}
	line, err := c.out.ReadString('\n')
	line = strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(line, "READY ") {
		stdin.Close()
		cmd.Wait()
		close(c.done)
		return nil, line
	}
	c.Slot, _ = strconv.Atoi(strings.TrimPrefix(line, "READY "))
	go func() { cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	return c, ""
}

func mustChild(t *testing.T, d *testenv.Daemon, session string, bytes uint64, env ...string) *child {
	t.Helper()
	c, errLine := startChild(t, d, session, bytes, -1, env...)
	if c == nil {
		t.Fatalf("child did not attach: %q", errLine)
	}
	return c
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	c.stdin.Close()
	<-c.done
}

func (c *child) pid() uint32 { return uint32(c.cmd.Process.Pid) }

// waitFor polls cond until it holds (a generous bound, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last state: %s)", what, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func create(t *testing.T, d *testenv.Daemon, req client.SessionRequest) *client.Session {
	t.Helper()
	s, err := d.Client().CreateSession(ctx(t), req)
	if err != nil {
		t.Fatalf("create %s: %v", req.ID, err)
	}
	return s
}

func get(t *testing.T, d *testenv.Daemon, id string) *client.Session {
	t.Helper()
	s, err := d.Client().GetSession(ctx(t), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return s
}

const (
	giB = uint64(1) << 30
	miB = uint64(1) << 20
)
