package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpusliced.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GPUSLICE_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	cfg, err := Load([]string{"--config", writeFile(t, "")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	if cfg.RuntimeDir != want.RuntimeDir || cfg.Overcommit != 1.0 || cfg.DefaultTTL != 24*time.Hour ||
		cfg.RecoveryInterval != 5*time.Second || cfg.LedgerSlots != 4096 ||
		cfg.IPCSocket != "/run/gpuslice/ipc.sock" || cfg.AdminSocket != "/run/gpuslice/admin.sock" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestPrecedence(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "overcommit: 1.5\ndefault_ttl: 2h\nrecovery_interval: 7s\nruntime_dir: /file/run\nlog_level: warn\n")
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(Config) bool
	}{
		{"file", nil, nil, func(c Config) bool {
			return c.Overcommit == 1.5 && c.DefaultTTL == 2*time.Hour && c.RuntimeDir == "/file/run" &&
				c.IPCSocket == "/file/run/ipc.sock" && c.LogLevel == "warn"
		}},
		{"env over file", map[string]string{"GPUSLICE_DEFAULT_TTL": "3h", "GPUSLICE_OVERCOMMIT": "2"}, nil,
			func(c Config) bool { return c.DefaultTTL == 3*time.Hour && c.Overcommit == 2 }},
		{"flag over env", map[string]string{"GPUSLICE_DEFAULT_TTL": "3h"}, []string{"--default-ttl", "4h"},
			func(c Config) bool { return c.DefaultTTL == 4*time.Hour && c.Overcommit == 1.5 }},
		{"recovery interval env", map[string]string{"GPUSLICE_RECOVERY_INTERVAL": "250ms"}, nil,
			func(c Config) bool { return c.RecoveryInterval == 250*time.Millisecond }},
		{"token env", map[string]string{"GPUSLICE_IPC_TOKEN": "abc", "GPUSLICE_IPC_TOKEN_REQUIRED": "1"}, nil,
			func(c Config) bool { return c.IPCToken == "abc" && c.IPCTokenRequired }},
		{"metrics debug env", map[string]string{"GPUSLICE_METRICS_DEBUG": "1"}, nil,
			func(c Config) bool { return c.MetricsDebug }},
		{"debug env", map[string]string{"GPUSLICE_DEBUG": "1"}, nil,
			func(c Config) bool { return c.LogLevel == "debug" }},
		{"socket env aliases", map[string]string{"GPUSLICE_IPC_SOCK": "/x/i.sock", "GPUSLICE_ADMIN_SOCK": "/x/a.sock"}, nil,
			func(c Config) bool { return c.IPCSocket == "/x/i.sock" && c.AdminSocket == "/x/a.sock" }},
		{"runtime and state dir env", map[string]string{"GPUSLICE_RUNTIME_DIR": "/e/run", "GPUSLICE_STATE_DIR": "/e/state"}, nil,
			func(c Config) bool {
				return c.RuntimeDir == "/e/run" && c.StateDir == "/e/state" && c.AdminSocket == "/e/run/admin.sock"
			}},
		{"flags", nil, []string{"--listen", "127.0.0.1:9400", "--nvml-library", "/l.so", "--ledger-slots", "8"},
			func(c Config) bool {
				return c.Listen == "127.0.0.1:9400" && c.NVMLLibrary == "/l.so" && c.LedgerSlots == 8
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := Load(append([]string{"--config", file}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("unexpected config: %+v", cfg)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown key", "overcommit: 1.0\n\nlisten_addr: :9400\n", nil, nil, []string{"line 3", `unknown key "listen_addr"`}},
		{"syntax", "overcommit: 1.0\ndefault_ttl: [1h\n", nil, nil, []string{"line"}},
		{"tab indentation", "overcommit: 1.0\n\tstate_dir: /x\n", nil, nil, []string{"line 2"}},
		{"wrong type", "runtime_dir: /r\nledger_slots: many\n", nil, nil, []string{"line 2", "many"}},
		{"bad duration", "default_ttl: soon\n", nil, nil, []string{"line 1"}},
		{"not a mapping", "- a\n- b\n", nil, nil, []string{"line 1", "mapping"}},
		{"overcommit zero", "overcommit: 0\n", nil, nil, []string{"line 1", "overcommit must be a number in (0, 1000]"}},
		{"overcommit NaN", "runtime_dir: /r\novercommit: .nan\n", nil, nil, []string{"line 2", "overcommit"}},
		{"overcommit infinite", "overcommit: .inf\n", nil, nil, []string{"line 1", "overcommit"}},
		{"overcommit negative", "overcommit: -2\n", nil, nil, []string{"line 1", "overcommit"}},
		{"overcommit NaN in env", "", nil, map[string]string{"GPUSLICE_OVERCOMMIT": "NaN"}, []string{"overcommit"}},
		{"recovery interval 1ns", "\nrecovery_interval: 1ns\n", nil, nil, []string{"line 2", "recovery_interval must be at least"}},
		{"recovery interval 1ns flag", "", []string{"--recovery-interval", "1ns"}, nil, []string{"recovery_interval must be at least"}},
		{"recovery interval negative", "recovery_interval: -5s\n", nil, nil, []string{"line 1", "recovery_interval"}},
		{"ledger slots fraction", "log_level: info\nledger_slots: 1.5\n", nil, nil, []string{"line 2", "ledger_slots must be a whole number", "1.5"}},
		{"ledger slots zero", "ledger_slots: 0\n", nil, nil, []string{"line 1", "ledger_slots must be 1..65536"}},
		{"default ttl zero", "default_ttl: 0s\n", nil, nil, []string{"line 1", "default_ttl"}},
		{"history retention negative", "history_retention: -1h\n", nil, nil, []string{"line 1", "history_retention"}},
		{"audit interval too small", "audit_interval: 1us\n", nil, nil, []string{"line 1", "audit_interval"}},
		{"audit policy unknown", "audit_policy: shrug\n", nil, nil, []string{"line 1", "audit_policy"}},
		{"conns per uid fraction", "ipc_conns_per_uid: 2.5\n", nil, nil, []string{"line 1", "whole number"}},
		{"conns per uid zero", "ipc_conns_per_uid: 0\n", nil, nil, []string{"line 1", "ipc_conns_per_uid"}},
		{"context probe relative", "context_probe: bin/gpuslice-ctxprobe\n", nil, nil, []string{"line 1", "context_probe must be an absolute path or empty"}},
		{"log level", "", []string{"--log-level", "loud"}, nil, []string{"log_level"}},
		{"compute default unknown", "compute_default: most\n", nil, nil, []string{"line 1", `compute_default "most": want proportional, a percent 1..100 or off`}},
		{"compute max off", "log_level: info\ncompute_max: off\n", nil, nil, []string{"line 2", `compute_max "off": want proportional or a percent 1..100`}},
		{"compute max zero", "", []string{"--compute-max", "0"}, nil, []string{"compute_max"}},
		{"compute cap over 100", "compute_cap: 101\n", nil, nil, []string{"line 1", "compute_cap"}},
		{"token required without token", "", nil, map[string]string{"GPUSLICE_IPC_TOKEN_REQUIRED": "1"}, []string{"ipc_token"}},
		{"bad env duration", "", nil, map[string]string{"GPUSLICE_DEFAULT_TTL": "forever"}, []string{"default_ttl"}},
		{"stray argument", "", []string{"extra"}, nil, []string{"unexpected argument"}},
		{"missing file", "", []string{"--config", "/nonexistent/gpusliced.yaml"}, nil, []string{"/nonexistent/gpusliced.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			file := writeFile(t, tc.file)
			args := append([]string{"--config", file}, tc.args...)
			_, err := Load(args, io.Discard)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
			if tc.file != "" && !strings.Contains(err.Error(), file) && strings.Contains(tc.want[0], "line") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

// The compute policy from the file, the environment and flags; by default
// a job's weight follows its quota and may not exceed it, with no ceiling.
func TestComputePolicyKeys(t *testing.T) {
	clearEnv(t)
	cfg, err := Load([]string{"--config", writeFile(t, "")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cfg.ComputePolicy(); err != nil || p != api.DefaultComputePolicy() {
		t.Errorf("default policy %+v %v, want %+v", p, err, api.DefaultComputePolicy())
	}
	t.Setenv("GPUSLICE_COMPUTE_USER_SHARE", "false")
	cfg, err = Load([]string{"--config", writeFile(t, "compute_max: 50\ncompute_default: 20%\n"), "--compute-cap", "proportional"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := api.ComputePolicy{Default: api.Compute{Mode: api.ComputePercent, Percent: 20}, Max: api.ShareLimit{Percent: 50},
		Cap: api.ShareLimit{Proportional: true}}
	if p, err := cfg.ComputePolicy(); err != nil || p != want {
		t.Errorf("policy %+v %v, want %+v", p, err, want)
	}
}

// The annotated example config in etc/ must load as is.
func TestExampleConfig(t *testing.T) {
	clearEnv(t)
	cfg, err := Load([]string{"--config", "../../etc/gpusliced.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != "../../etc/gpusliced.yaml" {
		t.Fatalf("file %q", cfg.File)
	}
}
