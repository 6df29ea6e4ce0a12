package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// emptyLib builds a shared library that exports nothing of NVML's.
func emptyLib(t *testing.T, dir string) string {
	t.Helper()
	src, lib := filepath.Join(dir, "empty.c"), filepath.Join(dir, "libempty.so")
	os.WriteFile(src, []byte("int gpuslice_test_empty;\n"), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// TestStartupErrors runs gpusliced with bad input: it must stop at once with
// a clear message and a non-zero status, touching nothing.
func TestStartupErrors(t *testing.T) {
	bin := testenv.Artifact(t, "bin/gpusliced")
	nvml := testenv.Artifact(t, "lib/libnvidia-ml.so.1")
	dir, err := os.MkdirTemp("/tmp", "gs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	conf := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	base := []string{"--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state")}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown key", []string{"--config", conf("a.yaml", "overcommit: 1.0\nruntime_dir: /x\nledger_slot: 4\n"), "--nvml-library", nvml},
			2, []string{"a.yaml", "line 3", `unknown key "ledger_slot"`}},
		{"malformed yaml", []string{"--config", conf("b.yaml", "overcommit: 1.0\n  listen: :1\n"), "--nvml-library", nvml},
			2, []string{"b.yaml", "line 2"}},
		{"wrong type", []string{"--config", conf("c.yaml", "# comment\nledger_slots: lots\n"), "--nvml-library", nvml},
			2, []string{"c.yaml", "line 2", "lots"}},
		{"bad flag", []string{"--overcommit", "x", "--nvml-library", nvml}, 2, []string{"overcommit"}},
		{"no NVML", []string{"--nvml-library", filepath.Join(dir, "missing", "libnvidia-ml.so.1")}, 1,
			[]string{"load NVML", "missing/libnvidia-ml.so.1"}},
		{"not NVML", []string{"--nvml-library", emptyLib(t, dir)}, 1,
			[]string{"not a usable NVML library", "nvmlInit_v2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(append([]string{}, base...), tc.args...)...)
			cmd.Env = append(testenv.BaseEnv(), "FAKECUDA_STATE=gstest-startup")
			out, _ := cmd.CombinedOutput()
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d\n%s", got, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "run", "ipc.sock")); err == nil {
				t.Fatal("a socket was created by a daemon that refused to start")
			}
		})
	}
	os.Remove("/dev/shm/fakecuda-gstest-startup")
}
