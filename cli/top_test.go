package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// tmuxPane drives one program in a private tmux server and reads its screen.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func startTmux(t *testing.T, command string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed (make deps installs it)")
	}
	p := &tmuxPane{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	p.run("new-session", "-d", "-x", "140", "-y", "45", command)
	p.run("set-option", "-t", "0", "remain-on-exit", "on")
	t.Cleanup(func() { exec.Command("tmux", "-S", p.sock, "kill-server").Run() })
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	c := exec.Command("tmux", append([]string{"-S", p.sock}, args...)...)
	c.Env = append(testenv.BaseEnv(), "TERM=xterm-256color")
	out, err := c.CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (p *tmuxPane) screen() string { return p.run("capture-pane", "-p", "-t", "0") }

// waitFor polls the screen until every want is on it (and no unwanted
// text), failing with the last screen after a generous deadline.
func (p *tmuxPane) waitFor(want []string, unwanted []string) string {
	p.t.Helper()
	var s string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s = p.screen()
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(s, w)
		}
		for _, u := range unwanted {
			ok = ok && !strings.Contains(s, u)
		}
		if ok {
			return s
		}
	}
	p.t.Fatalf("screen never showed %q without %q; last screen:\n%s", want, unwanted, s)
	return ""
}

func (p *tmuxPane) dead() bool {
	return strings.TrimSpace(p.run("display-message", "-p", "-t", "0", "#{pane_dead}")) == "1"
}

// lookupUID returns the uid of a test user (made when missing).
func lookupUID(t *testing.T, name string) uint32 {
	t.Helper()
	return testenv.User(t, name).UID
}

// job3001Row: JOB USER GPUS QUOTA USED PEAK PROCS DENIED.
var job3001Row = regexp.MustCompile(`(?m)^3001 +gsltest1 +0 +4GiB +4GiB +4GiB +1 +1 *$`)

// TestTopInTmux drives `gpuslice top` in a terminal, as root and as a job's
// user, while a process allocates under a quota, and reads the screen.
func TestTopInTmux(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs top as another user and must run as root (CI does)")
	}
	uid1, uid2 := lookupUID(t, "gsltest1"), lookupUID(t, "gsltest2")
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB"})
	ctx := context.Background()
	for _, r := range []client.SessionRequest{
		{ID: "3001", UID: uid1, QuotaBytes: 4 << 30, GPUs: []string{"0"}},
		{ID: "3002", UID: uid2, QuotaBytes: 2 << 30},
	} {
		if _, err := d.Client().CreateSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Job 3001 holds 3 GiB and is denied once (fakecuda, interceptor preloaded).
	app := exec.Command(testenv.Artifact(t, "examples/target_app"), "--api", "driver", "--step", "1G", "--count", "5", "--hold", "120")
	app.Env = append(d.Env(), "GPUSLICE_SESSION=3001", "LD_PRELOAD="+testenv.Artifact(t, "lib/libgpuslice.so"))
	out, _ := app.StdoutPipe()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Process.Kill(); app.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "when=held") {
	}
	bin := testenv.Artifact(t, "bin/gpuslice")
	top := fmt.Sprintf("%s --admin-socket %s --ipc-socket %s top --interval 200ms", bin, d.AdminSock, d.IPCSock)

	t.Run("root sees every job", func(t *testing.T) {
		p := startTmux(t, top)
		p.waitFor([]string{"all jobs", "GPU 0", "GPU 1", "capacity 16GiB", "[####", "used 4GiB", "committed 6GiB",
			"3001", "gsltest1", "3002", "gsltest2", "4GiB", "1"}, nil)
		s := p.screen()
		if !job3001Row.MatchString(s) {
			t.Fatalf("job 3001's row (quota, used, peak, processes, denials) not as expected:\n%s", s)
		}
		// It refreshes: a new job shows up without a key press.
		if _, err := d.Client().CreateSession(ctx, client.SessionRequest{ID: "3003", UID: uid2, QuotaBytes: 1 << 30, GPUs: []string{"1"}}); err != nil {
			t.Fatal(err)
		}
		p.waitFor([]string{"3003", "committed 3GiB"}, nil)
		p.run("send-keys", "-t", "0", "q")
		for deadline := time.Now().Add(10 * time.Second); !p.dead(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("top did not quit on q:\n%s", p.screen())
			}
		}
	})

	t.Run("a user sees their own jobs", func(t *testing.T) {
		p := startTmux(t, fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups %s", uid1, uid1, top))
		s := p.waitFor([]string{"your jobs", "GPU 0", "capacity 16GiB", "3001", "gsltest1"}, []string{"3002", "3003", "gsltest2"})
		if !job3001Row.MatchString(s) || !strings.Contains(s, "[####") {
			t.Fatalf("job 3001's row or the GPU bar not as expected:\n%s", s)
		}
		p.run("send-keys", "-t", "0", "q")
		for deadline := time.Now().Add(10 * time.Second); !p.dead(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("top did not quit on q:\n%s", p.screen())
			}
		}
	})
}
