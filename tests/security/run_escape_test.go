package security

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Outside Slurm, `gpuslice run --gpu-mem 256M -- CMD`: a process of CMD
// that drops LD_PRELOAD and takes 512 MiB is still attributed to the
// run's session (the cgroup gpuslice run starts CMD in, which the process
// cannot leave) and the audit stops it, as under Slurm. It used to be
// attributed to nothing and left alone.
func TestRunEscapeStopped(t *testing.T) {
	d := daemon(t)
	bin := testenv.Artifact(t, "bin/gpuslice")
	prog := gsProbe(t)
	// The command: one process within the quota through the interceptor,
	// one without it over the quota; the run waits for both.
	script := `sleep 617 | "$1" dev:0 alloc:64M pause >"$2/good.out" 2>&1 &
sleep 617 | env -u LD_PRELOAD "$1" dev:0 alloc:512M pause >"$2/bad.out" 2>&1 &
wait`
	dir := t.TempDir()
	cmd := exec.Command(bin, "--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock,
		"run", "-q", "--gpu-mem", "256M", "--id", "runesc", "--", "sh", "-c", script, "sh", prog, dir)
	cmd.Env = append(d.Env(), "GPUSLICE_PRELOAD="+testenv.Artifact(t, "lib/libgpuslice.so"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		exec.Command("pkill", "-KILL", "-f", "^sleep 617$").Run()
		cmd.Process.Kill()
	})
	probe.Eventually(t, 20*time.Second, "the bypassing process stopped", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(dir, "bad.out"))
		return strings.Contains(d.Log(), "audit: session over its quota") && strings.Contains(d.Log(), "runesc"),
			"bad.out: " + string(b) + "\nrun: " + stderr.String()
	})
	if strings.Contains(stderr.String(), "no cgroup for the command") {
		t.Fatalf("gpuslice run made no cgroup: %s", stderr.String())
	}
	// The good process is still there: the session holds its 64 MiB.
	if u := used(t, d, "runesc"); u != 64*MiB {
		t.Errorf("session used %d after the audit, want the good process's 64 MiB", u)
	}
	exec.Command("pkill", "-KILL", "-f", "^sleep 617$").Run() // the good process's pause ends
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("gpuslice run did not end")
	}
}
