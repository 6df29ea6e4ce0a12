package core

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/cli"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// `gpuslice run` owns its cgroup whole: what its command leaves running
// is killed when the run ends (as Slurm kills a step's leftovers), a run
// never starts in a cgroup that holds another run's processes nor shares
// another run's session, and a run signalled with its command, or killed
// outright, still releases its session and removes its cgroup (gpusliced
// does it when the run's own process is gone).

// leftoverScript starts a process that outlives the command (its own
// session, as a daemon makes itself) holding 64 MiB through the
// interceptor, says "ready PID" once it holds them, and ends when its
// stdin closes.
const leftoverScript = `setsid "$TARGET_APP" --step 64M --count 1 --hold 6171 >"$1" 2>&1 &
while ! grep -q event=hold "$1"; do sleep 0.01; done
echo ready $!
read x || exit 0`

// At the end of a run nothing its command started is left running.
func TestRunKillsLeftovers(t *testing.T) {
	d := runDaemon(t)
	id := "run-left"
	p := startRun(t, gsRunCmd(t, d, "--gpu-mem", "1G", "--id", id, "--", "sh", "-c", leftoverScript, "sh", filepath.Join(t.TempDir(), "left.out")))
	left := p.ready(t)
	if !left.alive() {
		t.Fatal("the leftover is not running before the run ends")
	}
	p.stdin.Close() // the command ends; its leftover would go on
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d, want the command's 0\nstderr: %s", code, p.Stderr())
	}
	if left.alive() {
		t.Errorf("process %d the command left behind still runs after the run ended", left.pid)
	}
	if exists(runCgroup(id)) {
		t.Errorf("cgroup %s left behind", runCgroup(id))
	}
	if !strings.Contains(p.Stderr(), "session "+id+" released") {
		t.Errorf("no released summary:\n%s", p.Stderr())
	}
	if rep := released(t, d, id); rep.GPUs[0].PeakBytes != 64*MiB {
		t.Errorf("report peak %d, want the leftover's 64 MiB", rep.GPUs[0].PeakBytes)
	}
}

// A run with the --id of an earlier one whose command left a process
// behind gets a session and a cgroup of its own: the earlier leftover's
// memory is not counted against it (an 800 MiB command inside its 1 GiB
// quota beside a 300 MiB leftover was killed, exit 137). A run never
// starts in a cgroup that holds processes, nor in a live session.
func TestRunSameID(t *testing.T) {
	d := runDaemon(t)
	t.Run("after a run that left a process", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "left.out")
		// The leftover drops the interceptor: only its cgroup ties it to
		// a session.
		script := `setsid env -u LD_PRELOAD "$TARGET_APP" --step 300M --count 1 --hold 6171 >"$1" 2>&1 &
while ! grep -q event=hold "$1"; do sleep 0.01; done
echo ready $!`
		first := startRun(t, gsRunCmd(t, d, "-q", "--gpu-mem", "1G", "--id", "twin", "--", "sh", "-c", script, "sh", out))
		first.ready(t)
		if code := first.wait(t); code != 0 {
			t.Fatalf("first run: exit %d\n%s", code, first.Stderr())
		}
		second := startRun(t, gsRunCmd(t, d, "--gpu-mem", "1G", "--id", "twin", "--",
			example(t, "target_app"), "--step", "800M", "--count", "1", "--hold", "1"))
		second.stdin.Close()
		code := second.wait(t)
		if code != 0 {
			t.Errorf("second run: exit %d, want 0: its 800 MiB fit its 1 GiB\n%s", code, second.Stderr())
		}
		rep := released(t, d, "twin")
		if rep.AuditKilled != 0 || rep.GPUs[0].PeakBytes != 800*MiB {
			t.Errorf("second run's report: peak %d, audit %v (killed %d); want its own 800 MiB, nothing audited",
				rep.GPUs[0].PeakBytes, rep.Audit, rep.AuditKilled)
		}
	})

	t.Run("while a run with the id is running", func(t *testing.T) {
		first := startRun(t, gsRunCmd(t, d, "--gpu-mem", "1G", "--id", "dup", "--", "sh", "-c", `echo ready $$; read x || exit 0`))
		sh := first.ready(t)
		second := gsRunCmd(t, d, "--gpu-mem", "1G", "--id", "dup", "--", "true")
		second.SysProcAttr = nil
		out, _ := second.CombinedOutput()
		if code := second.ProcessState.ExitCode(); code != cli.ExitConflict || !strings.Contains(string(out), "dup") {
			t.Errorf("second run with the id of a running one: exit %d, want %d with a message naming the id:\n%s", code, cli.ExitConflict, out)
		}
		if s, err := d.Client().GetSession(ctx(t), "dup"); err != nil {
			t.Errorf("the first run's session is gone after the second run: %v", err)
		} else if len(s.Processes) != 0 || !sh.alive() {
			t.Errorf("the first run's command: alive %v, session processes %v", sh.alive(), s.Processes)
		}
		first.stdin.Close()
		if code := first.wait(t); code != 0 || !strings.Contains(first.Stderr(), "session dup released") {
			t.Errorf("first run: exit %d\n%s", code, first.Stderr())
		}
	})

	t.Run("cgroup holding processes", func(t *testing.T) {
		// What an earlier run left there (or a run gpusliced is cleaning
		// up): not this run's to take over, nor to kill.
		cg := runCgroup("held")
		if err := os.Mkdir(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		sleeper := exec.Command("sleep", "6171")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sleeper.Process.Kill()
			sleeper.Wait()
			dropCgroup(cg)
		})
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(fmt.Sprint(sleeper.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		c := gsRunCmd(t, d, "--gpu-mem", "1G", "--id", "held", "--", "sh", "-c", "echo ran")
		c.SysProcAttr = nil
		out, _ := c.CombinedOutput()
		if code := c.ProcessState.ExitCode(); code != cli.ExitConflict || strings.Contains(string(out), "ran") || !strings.Contains(string(out), cg) {
			t.Errorf("run into a cgroup holding a process: exit %d, want %d without running the command, naming %s:\n%s",
				code, cli.ExitConflict, cg, out)
		}
		if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("the process in the cgroup was killed: %v", err)
		}
		if _, err := d.Client().GetSession(ctx(t), "held"); err == nil {
			t.Error("session held left live")
		}
	})
}

// A run signalled together with its command (Ctrl-C, `timeout`: the
// process group), once or several times in a row, by any of the signals
// it forwards, still kills what the command left, removes its cgroup,
// releases its session and prints its summary.
func TestRunSignalledWithCommand(t *testing.T) {
	d := runDaemon(t)
	sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
	for try := 0; try < 20; try++ {
		// Once, twice, three times, or (every fifth try) a burst of 20
		// a few milliseconds apart: some arrive while the run cleans up.
		sig, times, gap := sigs[try%len(sigs)], 1+try%3, 100*time.Millisecond
		if try%5 == 4 {
			times, gap = 20, 2*time.Millisecond
		}
		id := fmt.Sprintf("sig%d", try)
		// A leftover in its own session is not signalled with the group.
		p := startRun(t, gsRunCmd(t, d, "--gpu-mem", "1G", "--id", id, "--", "sh", "-c", `setsid sleep 6171 >/dev/null 2>&1 &
until [ "$(cat /proc/$!/comm)" = sleep ]; do :; done
echo ready $!; wait`))
		left := p.ready(t)
		pgid := p.cmd.Process.Pid
		for i := 0; i < times; i++ {
			syscall.Kill(-pgid, sig)
			time.Sleep(time.Duration(i) * gap)
		}
		code := p.wait(t)
		what := fmt.Sprintf("try %d (%v ×%d, exit %d)", try, sig, times, code)
		if s, err := d.Client().GetSession(ctx(t), id); err == nil {
			t.Errorf("%s: session left live (expires %v)\nstderr: %s", what, s.Expires, p.Stderr())
			d.Client().DeleteSession(ctx(t), id)
		} else if _, err := d.Client().History(ctx(t), id); err != nil {
			t.Errorf("%s: no report: %v", what, err)
		}
		if exists(runCgroup(id)) {
			t.Errorf("%s: cgroup %s left", what, runCgroup(id))
		}
		if left.alive() {
			t.Errorf("%s: the command's leftover %d still runs", what, left.pid)
			syscall.Kill(int(left.pid), syscall.SIGKILL)
		}
		if !strings.Contains(p.Stderr(), "session "+id+" released") {
			t.Errorf("%s: no released summary; stderr:\n%s", what, p.Stderr())
		}
	}
}

// When the run's own process is killed (SIGKILL, the OOM killer),
// gpusliced releases its session, kills what is left in its cgroup and
// removes it; also when gpusliced was down at the time.
func TestRunKilled(t *testing.T) {
	d := runDaemon(t)
	script := `setsid sleep 6171 >/dev/null 2>&1 & echo ready $!
exec "$TARGET_APP" --step 64M --count 1 --hold 6171`
	for _, tc := range []struct {
		name  string
		group bool // SIGKILL the run and its command together
		down  bool // gpusliced is down when the run is killed
	}{
		{"run alone", false, false},
		{"with its command", true, false},
		{"while gpusliced is down", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "killed-" + strings.ReplaceAll(tc.name, " ", "-")
			p := startRun(t, gsRunCmd(t, d, "--gpu-mem", "1G", "--id", id, "--", "sh", "-c", script))
			left := p.ready(t)
			probe.Eventually(t, 20*time.Second, "the command attached", func() (bool, string) {
				s, err := d.Client().GetSession(ctx(t), id)
				return err == nil && len(s.Processes) == 1 && s.GPUs[0].UsedBytes == 64*MiB, fmt.Sprintf("%+v %v", s, err)
			})
			if tc.down {
				d.Stop()
			}
			target := p.cmd.Process.Pid
			if tc.group {
				target = -target
			}
			syscall.Kill(target, syscall.SIGKILL)
			p.wait(t)
			if tc.down {
				d.Restart()
			}
			var rep *client.Report
			probe.Eventually(t, 20*time.Second, "gpusliced released the killed run's session", func() (bool, string) {
				var err error
				rep, err = d.Client().History(ctx(t), id)
				return err == nil, fmt.Sprint(err)
			})
			released(t, d, id)
			if rep.Reason != "abandoned" {
				t.Errorf("report reason %q, want abandoned", rep.Reason)
			}
			if left.alive() {
				t.Errorf("the command's leftover %d still runs", left.pid)
			}
			if exists(runCgroup(id)) {
				t.Errorf("cgroup %s left", runCgroup(id))
			}
		})
	}
}

// A session is bound to the process that sent the create, as the kernel
// names the admin socket's peer: a creator_pid the body names alone
// (another process's) is refused, and a bound session is not handed to
// another creator's create.
func TestRunCreatorFromPeer(t *testing.T) {
	d := runDaemon(t)
	req := client.SessionRequest{ID: "bound", QuotaBytes: GiB, CreatorPID: 1}
	if _, err := d.Client().CreateSession(ctx(t), req); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("create with the creator_pid of pid 1: %v, want bad request", err)
	}
	if _, err := d.Client().GetSession(ctx(t), "bound"); err == nil {
		t.Fatal("session created for a creator_pid that did not send the request")
	}
	req.CreatorPID = uint32(os.Getpid())
	if _, err := d.Client().CreateSession(ctx(t), req); err != nil {
		t.Fatalf("create for this process: %v", err)
	}
	if _, err := d.Client().CreateSession(ctx(t), req); err != nil {
		t.Errorf("create again by the same process: %v, want the session as it is", err)
	}
	run := gsRunCmd(t, d, "--gpu-mem", "1G", "--id", "bound", "--", "echo", "ran")
	run.SysProcAttr = nil
	out, _ := run.CombinedOutput()
	if code := run.ProcessState.ExitCode(); code != cli.ExitConflict || strings.Contains(string(out), "ran") {
		t.Errorf("run with the id of a session bound to another process: exit %d, want %d without running:\n%s", code, cli.ExitConflict, out)
	}
	if _, err := d.Client().DeleteSession(ctx(t), "bound"); err != nil {
		t.Errorf("release: %v", err)
	}
}
