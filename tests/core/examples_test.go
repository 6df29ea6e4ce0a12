package core

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// XLA-style preallocation sizes itself from "free memory": inside an 8 GiB
// session on an 80 GiB GPU it takes about 75 % of 8 GiB, outside it 75 % of 80.
func TestXLAPreallocationFitsTheQuota(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 8 * GiB})
	l := openLedger(t, d, sess.ID)
	prog := example(t, "xla_prealloc")
	tests := []struct {
		name  string
		env   []string
		total uint64
	}{
		{"in the session", sessionEnv(t, d, sess.ID), 8 * GiB},
		{"without the interceptor", d.Env(), 80 * GiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := probe.Run(t, tc.env, prog)
			if r.Err != nil {
				t.Fatalf("xla_prealloc: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
			}
			noStderr(t, "xla_prealloc", r.Stderr)
			before := r.Find(t, "meminfo", 0)
			if before.Uint(t, "total") != tc.total {
				t.Errorf("total %s, want %d", before.Line, tc.total)
			}
			pre := r.Find(t, "prealloc", 0)
			if pre.Get("status") != "allowed" {
				t.Fatalf("preallocation: %s", pre.Line)
			}
			got := float64(pre.Uint(t, "bytes")) / float64(tc.total)
			if got < 0.74 || got > 0.76 {
				t.Errorf("preallocated %.3f of %d bytes, want about 0.75", got, tc.total)
			}
		})
	}
	if l.Peak(0) < 6*GiB-64*MiB || l.Peak(0) > 6*GiB+64*MiB {
		t.Errorf("session peak %d, want about 6 GiB", l.Peak(0))
	}
	if l.Used(0) != 0 || l.Reclaimed(0) != 0 {
		t.Errorf("after exit: used %d, reclaimed %d; want 0 and 0 (the free gave it back)", l.Used(0), l.Reclaimed(0))
	}
}

// The example programs that reach the driver in other ways: static
// runtime, dlopen + dlsym, the runtime library (cuGetProcAddress_v2),
// virtual memory (expandable segments), stream-ordered pools. Past the
// quota they are denied; their frees give every byte back (nothing is left
// for the daemon to reclaim at exit).
func TestExamplesEnforced(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 256 * MiB
	tests := []struct {
		prog    string
		args    []string
		check   func(t *testing.T, r probe.Result)
		charged uint64 // bytes the ledger's peak must show
	}{
		{"static_runtime", []string{"--step", "64MiB", "--count", "8"}, summary(4, 4), 256 * MiB},
		{"dlopen_driver", []string{"--size", "64MiB", "--count", "8"}, func(t *testing.T, r probe.Result) {
			if res := r.Find(t, "resolve", 0); res.Get("missing") != "0" {
				t.Errorf("resolve: %s", res.Line)
			}
			summary(4, 4)(t, r)
		}, 256 * MiB},
		{"target_app", []string{"--api", "runtime", "--step", "64MiB", "--count", "8"}, summary(4, 4), 256 * MiB},
		{"target_app", []string{"--api", "driver", "--step", "64MiB", "--count", "8"}, summary(4, 4), 256 * MiB},
		{"async_pool", []string{"--size", "32MiB", "--count", "8"}, summary(8, 8), 256 * MiB},
		{"expandable_segments", []string{"--step", "20MiB", "--count", "20", "--reserve", "1GiB"},
			func(t *testing.T, r probe.Result) {
				s := r.Find(t, "summary", 0)
				if s.Get("chunks") != "12" || s.Get("denied") != "1" || s.Uint(t, "mapped") != 240*MiB {
					t.Errorf("summary %s, want 12 chunks (240 MiB) mapped, then 1 denied", s.Line)
				}
			}, 240 * MiB},
	}
	for _, tc := range tests {
		t.Run(tc.prog+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
			l := openLedger(t, d, sess.ID)
			r := probe.Run(t, sessionEnv(t, d, sess.ID), example(t, tc.prog), tc.args...)
			if r.Err != nil {
				t.Fatalf("%s: %v\n%s\n%s", tc.prog, r.Err, r.Stdout, r.Stderr)
			}
			noStderr(t, tc.prog, r.Stderr)
			tc.check(t, r)
			if l.Peak(0) != tc.charged || l.Denied(0) == 0 {
				t.Errorf("ledger peak %d denied %d; want peak %d and denials", l.Peak(0), l.Denied(0), tc.charged)
			}
			if l.Used(0) != 0 || l.Reclaimed(0) != 0 {
				t.Errorf("after exit: used %d, reclaimed %d; want 0 and 0", l.Used(0), l.Reclaimed(0))
			}
		})
	}
}

func summary(allowed, denied int) func(t *testing.T, r probe.Result) {
	return func(t *testing.T, r probe.Result) {
		t.Helper()
		s := r.Find(t, "summary", 0)
		if s.Int(t, "allowed") != int64(allowed) || s.Int(t, "denied") != int64(denied) {
			t.Errorf("summary %s, want allowed=%d denied=%d", s.Line, allowed, denied)
		}
	}
}

// nvidia-smi's view (NVML) inside a session reports the quota.
func TestNVMLQueryExample(t *testing.T) {
	d, gpus := twoGPUNode(t)
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 8 * GiB, GPUs: []string{gpus[0].UUID}})
	r := probe.Run(t, sessionEnv(t, d, sess.ID), example(t, "nvml_query"))
	if r.Err != nil {
		t.Fatalf("nvml_query: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	noStderr(t, "nvml_query", r.Stderr)
	uuidOf := map[string]string{}
	for _, dev := range r.All("device") {
		uuidOf[dev.Get("index")] = dev.Get("uuid")
	}
	for _, ev := range []string{"memory", "memory_v2"} {
		ms := r.All(ev)
		if len(ms) != 2 {
			t.Fatalf("%d %s lines:\n%s", len(ms), ev, r.Stdout)
		}
		for _, m := range ms {
			want := uint64(0)
			if uuidOf[m.Get("index")] == gpus[0].UUID {
				want = 8 * GiB
			}
			if m.Uint(t, "total") != want || m.Uint(t, "free") != want || m.Uint(t, "used") != 0 {
				t.Errorf("%s, want total=free=%d used=0", m.Line, want)
			}
		}
	}
}
