package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// StartStepd starts argv under a stand-in for Slurm's slurmstepd of job: a
// root process whose executable is named slurmstepd and whose title is
// "slurmstepd: [<job>.0]" (what gpusliced recognises a job's step by in
// /proc). It is a copy of bash that runs argv as its child and waits; the
// whole process group is killed at cleanup (argv is a grandchild holding
// the output pipe).
func StartStepd(t testing.TB, job string, env []string, argv ...string) *Proc {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "slurmstepd")
	CopyFile(t, "/bin/bash", bin, 0o755)
	cmd := exec.Command(bin, append([]string{"-c", `"$@" <&0 & wait $!`, "bash"}, argv...)...)
	cmd.Args[0] = "slurmstepd: [" + job + ".0]"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := StartCmd(t, cmd, env)
	// Runs before the probe's own cleanup.
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return p
}

// CopyFile copies from to to with mode.
func CopyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond every 10 ms until it holds, failing the test when
// within passes first (cond's second result says what it saw).
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (%s)", what, within, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
