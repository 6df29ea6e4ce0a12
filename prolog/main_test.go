package prolog

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// Main without a daemon: the paths that must not need one, and the exit
// statuses slurmd acts on (non-zero Prolog drains the node).
func TestMainWithoutDaemon(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "admin.sock") // nothing listens here
	job := map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1000"}
	withQuota := map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1000", "SPANK_GPU_MEM": "1073741824"}
	tests := []struct {
		name   string
		mode   Mode
		args   []string
		env    map[string]string
		code   int
		stderr string // substring; "" means stderr must be empty
	}{
		{"prolog, no quota: nothing to do", ModeProlog, []string{"--admin-socket", dead}, job, 0, ""},
		{"epilog, no quota: nothing to do", ModeEpilog, []string{"--admin-socket", dead}, job, 0, ""},
		{"prolog, quota, daemon unreachable: fails with the reason", ModeProlog,
			[]string{"--admin-socket", dead, "--retry-timeout", "300ms"}, withQuota, 1, "cannot set up the GPU memory quota of 1GiB"},
		{"epilog, quota, daemon unreachable: logged, exit 0", ModeEpilog,
			[]string{"--admin-socket", dead, "--retry-timeout", "300ms"}, withQuota, 0, "TTL reaper"},
		{"prolog, --default gives a quota", ModeProlog,
			[]string{"--admin-socket", dead, "--retry-timeout", "300ms", "--default", "2G"}, job, 1, "quota of 2GiB"},
		{"prolog, not run by slurmd", ModeProlog, []string{"--admin-socket", dead}, map[string]string{}, 1, "SLURM_JOB_ID is not set"},
		{"epilog, bad quota variable: logged, exit 0", ModeEpilog, []string{"--admin-socket", dead},
			map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "1", "SPANK_GPU_MEM": "x"}, 0, "SPANK_GPU_MEM"},
		{"prolog, bad quota variable: fails", ModeProlog, []string{"--admin-socket", dead},
			map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "1", "SPANK_GPU_MEM": "x"}, 1, "SPANK_GPU_MEM"},
		{"bad --default", ModeProlog, []string{"--default", "8X"}, job, 2, "--default"},
		{"bad --ttl", ModeProlog, []string{"--ttl", "10ms"}, withQuota, 2, "--ttl"},
		{"unknown flag", ModeProlog, []string{"--bogus"}, job, 2, "bogus"},
		{"stray argument", ModeEpilog, []string{"x"}, job, 2, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Main(tt.mode, tt.args, envFunc(tt.env), &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if tt.stderr == "" && stderr.Len() != 0 {
				t.Fatalf("unexpected stderr: %s", stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tt.stderr)
			}
		})
	}
}
