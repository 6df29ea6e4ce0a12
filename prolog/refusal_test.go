package prolog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// A quota gpusliced refuses is the job's failure, not the node's: the
// Prolog exits 0 and leaves one line naming the GPU, what is free and what
// was asked; the Epilog removes it. An unreachable daemon still fails the
// Prolog (TestMainWithoutDaemon).
func TestPrologRefusalDoesNotFail(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x8GiB"})
	dir := filepath.Join(t.TempDir(), "refused")
	env := map[string]string{"SLURM_JOB_ID": "300", "SLURM_JOB_UID": "1000", "SLURMD_NODENAME": "tn1",
		"SPANK_GPU_MEM": "10737418240", "SLURM_JOB_GPUS": "1"}
	var stderr bytes.Buffer
	code := Main(ModeProlog, []string{"--admin-socket", d.AdminSock, "--refusal-dir", dir}, envFunc(env), &stderr)
	if code != 0 {
		t.Fatalf("Prolog exit %d on a refused quota, want 0 (a non-zero Prolog drains the node); stderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "300"))
	if err != nil {
		t.Fatalf("no refusal line for the job: %v; stderr:\n%s", err, stderr.String())
	}
	line := string(b)
	for _, want := range []string{"gpuslice: job 300 cannot start on node tn1", "GPU 1 (", "asked 10GiB", "8GiB free"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal line %q lacks %q", line, want)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Errorf("refusal is not one line: %q", line)
	}
	if fi, err := os.Stat(filepath.Join(dir, "300")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("refusal file mode: %v %v, want 0644 (read by the job's user)", fi.Mode(), err)
	}
	// The Epilog removes it (the job had no session).
	stderr.Reset()
	if code := Main(ModeEpilog, []string{"--admin-socket", d.AdminSock, "--refusal-dir", dir}, envFunc(env), &stderr); code != 0 {
		t.Fatalf("Epilog exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "300")); !os.IsNotExist(err) {
		t.Fatalf("refusal left after the Epilog: %v", err)
	}
	// Default directory: next to the admin socket.
	stderr.Reset()
	env["SLURM_JOB_ID"] = "301"
	if code := Main(ModeProlog, []string{"--admin-socket", d.AdminSock}, envFunc(env), &stderr); code != 0 {
		t.Fatalf("Prolog exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(d.AdminSock), RefusalDirName, "301")); err != nil {
		t.Fatalf("refusal not next to the admin socket: %v", err)
	}
}
