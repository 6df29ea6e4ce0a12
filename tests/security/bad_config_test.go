package security

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// An admin's typo must stop the daemon with the line at fault, never run
// it with a value that admits 1000 TiB on an 80 GiB GPU (NaN), burns a
// core (1ns) or silently truncates (1.5).
func TestBadConfigRefused(t *testing.T) {
	bin := testenv.Artifact(t, "bin/gpusliced")
	tests := []struct {
		name, yaml, want string
	}{
		{"overcommit NaN", "log_level: info\novercommit: .nan\n", "line 2"},
		{"overcommit infinite", "overcommit: .inf\n", "line 1"},
		{"recovery interval 1ns", "recovery_interval: 1ns\n", "line 1"},
		{"ledger slots 1.5", "\n\nledger_slots: 1.5\n", "line 3"},
		{"negative TTL", "default_ttl: -1h\n", "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "gpusliced.yaml")
			os.WriteFile(cfg, []byte(tc.yaml), 0o644)
			cmd := exec.Command(bin, "--config", cfg, "--runtime-dir", filepath.Join(dir, "run"),
				"--state-dir", filepath.Join(dir, "state"))
			cmd.Env = append(testenv.BaseEnv(), "FAKECUDA_DEVICES=80GiB", "FAKECUDA_STATE=sec-cfg",
				"LD_LIBRARY_PATH="+filepath.Join(testenv.BuildDir(t), "lib"))
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-timeAfter(t):
				cmd.Process.Kill()
				<-done
				t.Fatalf("gpusliced started with %q", tc.yaml)
			}
			if err == nil || !strings.Contains(string(out), cfg) || !strings.Contains(string(out), tc.want) {
				t.Fatalf("gpusliced: %v\n%s\nwant an error naming %s, %s", err, out, cfg, tc.want)
			}
		})
	}
}
