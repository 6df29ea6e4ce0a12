package core

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

const oom = 2 // CUDA_ERROR_OUT_OF_MEMORY

// A context costs device memory that no allocation reports (fakecuda
// models 64 MiB here). The interceptor measures it from the driver's
// per-process figure and reserves it when a context becomes active, so a
// job whose contexts plus allocations exceed the quota is refused at the
// allocation or context creation, not found later by the audit.
func TestContextCostCharged(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})

	t.Run("refused", func(t *testing.T) {
		sess := newSession(t, d, client.SessionRequest{QuotaBytes: 256 * MiB})
		l := openLedger(t, d, sess.ID)
		p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
			"dev:0", "alloc:192M", "alloc:1M", "ctx:0:2", "free", "ctx:0:2", "ctx:0:3", "ctx:0:4", "ctx:0:1",
			"pause")
		p.Expect("paused")
		if u := l.Used(0); u != 256*MiB {
			t.Errorf("ledger used %d MiB with four contexts, want 256", u/MiB)
		}
		p.CloseStdin()
		if err := p.Wait(); err != nil {
			t.Fatalf("gs_probe: %v\n%s", err, p.Output())
		}
		r := p.Result()
		want := []struct {
			step string
			i    int
			rc   int64
		}{
			{"dev", 0, 0}, {"alloc", 0, 0}, {"alloc", 1, oom}, {"ctx", 0, oom},
			{"ctx", 1, 0}, {"ctx", 2, 0}, {"ctx", 3, 0}, {"ctx", 4, oom},
		}
		for _, w := range want {
			if rc := r.Find(t, w.step, w.i).Int(t, "rc"); rc != w.rc {
				t.Errorf("%s #%d: rc=%d, want %d\n%s", w.step, w.i, rc, w.rc, r.Stdout)
			}
		}
	})

	t.Run("quota below one context", func(t *testing.T) {
		sess := newSession(t, d, client.SessionRequest{QuotaBytes: 32 * MiB})
		l := openLedger(t, d, sess.ID)
		r := probe.Run(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), "dev:0", "alloc:1M")
		if rc := r.Find(t, "dev", 0).Int(t, "rc"); rc != oom {
			t.Errorf("primary context under a 32 MiB quota: rc=%d, want %d\n%s", rc, oom, r.Stdout)
		}
		if l.Peak(0) != 0 {
			t.Errorf("peak %d bytes after a refused context", l.Peak(0))
		}
	})
}

// The cost is given back with the context: cuCtxDestroy, the last
// cuCtxDetach, cuDevicePrimaryCtxReset and the last primary release; a
// reset primary context is charged again when it is retained again.
func TestContextCostReleased(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	steps := []struct {
		step string
		used uint64 // contexts charged afterwards
	}{
		{"dev:0", 1}, {"ctx:0:2", 2}, {"ctxdestroy", 1}, {"ctx:0:1", 2}, {"ctxattach", 2},
		{"ctxdetach", 2}, {"ctxdetach", 1}, {"pretain:0", 1}, {"prelease:0", 1}, {"preset:0", 0},
		{"pretain:0", 1}, {"prelease:0", 1}, {"prelease:0", 0},
	}
	var args []string
	for _, s := range steps {
		args = append(args, s.step, "pause")
	}
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), args...)
	for _, s := range steps {
		p.Expect("paused")
		if u := l.Used(0); u != s.used*64*MiB {
			t.Errorf("after %s: ledger used %d MiB, want %d", s.step, u/MiB, s.used*64)
		}
		p.Send("")
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("gs_probe: %v\n%s", err, p.Output())
	}
	r := p.Result()
	for _, s := range r.Steps {
		if v, ok := s.KV["rc"]; ok && v != "0" {
			t.Errorf("step %s failed: %v\n%s", s.Name, s.KV, r.Stdout)
		}
	}
}

// A program that only uses the runtime gets its context implicitly (the
// runtime retains the primary context at first use): the cost is charged
// all the same, by the runtime linked dynamically, statically, or through a
// dlopened driver.
func TestContextCostRuntime(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"target_app", []string{"--api", "runtime", "--step", "32MiB", "--count", "8"}},
		{"target_app", []string{"--api", "driver", "--step", "32MiB", "--count", "8"}},
		{"static_runtime", []string{"--step", "32MiB", "--count", "8"}},
	} {
		t.Run(tc.prog+" "+tc.args[1], func(t *testing.T) {
			sess := newSession(t, d, client.SessionRequest{QuotaBytes: 128 * MiB})
			l := openLedger(t, d, sess.ID)
			r := probe.Run(t, sessionEnv(t, d, sess.ID), example(t, tc.prog), tc.args...)
			if r.Err != nil {
				t.Fatalf("%s: %v\n%s\n%s", tc.prog, r.Err, r.Stdout, r.Stderr)
			}
			// 64 MiB of context + 2 x 32 MiB fill the 128 MiB quota
			if s := r.Find(t, "summary", 0); s.Get("allowed") != "2" {
				t.Errorf("summary %s: want allowed=2 (the context's 64 MiB counted)\n%s", s.Line, r.Stdout)
			}
			if p := l.Peak(0); p != 128*MiB {
				t.Errorf("peak %d MiB, want 128", p/MiB)
			}
		})
	}
}

// The first process of a session to create a context on a GPU measures
// its cost and leaves it in the ledger; the session's later processes
// charge that figure without measuring (they never start NVML for it). A
// figure larger than the GPU is ignored (measured again instead).
func TestContextCostSharedBySession(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID)
	if _, ok := l.CtxCost(0); ok {
		t.Fatal("a new session already has a context cost")
	}

	// withContext runs a process that holds a context on GPU 0 while check
	// looks at the ledger.
	withContext := func(name string, check func()) {
		t.Helper()
		p := probe.Start(t, env, probe.Bin(t, "gs_probe"), "dev:0", "pause")
		p.Expect("paused")
		check()
		p.CloseStdin()
		if err := p.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, p.Output())
		}
	}

	withContext("first process", func() {
		if c, ok := l.CtxCost(0); !ok || c != 64*MiB {
			t.Errorf("after the first process's context: cost %d (set %v), want 64 MiB measured", c, ok)
		}
		if u := l.Used(0); u != 64*MiB {
			t.Errorf("ledger used %d, want the first context's 64 MiB", u)
		}
	})

	// A later process charges the session's figure, not its own
	// measurement (fakecuda would show 64 MiB): 100 MiB stands out.
	l.SetCtxCost(0, 100*MiB)
	withContext("later process", func() {
		if u := l.Used(0); u != 100*MiB {
			t.Errorf("later process: ledger used %d MiB, want the session's 100 MiB figure", u/MiB)
		}
	})

	// Larger than the GPU (80 GiB here): ignored, measured again.
	l.SetCtxCost(0, 1<<40)
	withContext("process after a bogus figure", func() {
		if u := l.Used(0); u != 64*MiB {
			t.Errorf("with a figure larger than the GPU: ledger used %d MiB, want the measured 64", u/MiB)
		}
	})
}

// Only a process that has to measure a context's cost starts NVML: once
// the session has the figure, its later processes never load the library
// (a storm of a thousand ranks would each pay for it). target_app, unlike
// the probes, does not link NVML itself.
func TestLaterProcessDoesNotStartNVML(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID)
	run := func(name string, wantNVML bool) {
		t.Helper()
		p, nvml := holdFirstAlloc(t, env, 0)
		if nvml != wantNVML {
			t.Errorf("%s: NVML loaded %v, want %v", name, nvml, wantNVML)
		}
		release(t, p)
	}
	run("first process (measures)", true)
	if c, ok := l.CtxCost(0); !ok || c != 64*MiB {
		t.Fatalf("after the first process: cost %d (set %v), want 64 MiB", c, ok)
	}
	run("later process", false)
}

// Where NVML cannot attribute memory to processes it reports a process's
// memory as NVML_VALUE_NOT_AVAILABLE. That is not a figure: the first
// process cannot measure a context's cost, charges 0 (the audit cannot
// see it either) and leaves nothing in the ledger, and its context is
// not refused.
func TestContextCostUnavailableFromNVML(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	p, _ := holdFirstAlloc(t, sessionEnv(t, d, sess.ID, "FAKECUDA_NVML_PROCESS_MEMORY=unavailable"), 0)
	if u := l.Used(0); u != 2*MiB {
		t.Errorf("ledger used %d bytes with 2 MiB allocated and the context's cost unknown, want %d", u, 2*MiB)
	}
	if c, ok := l.CtxCost(0); ok {
		t.Errorf("a cost NVML could not give was left in the ledger: %d", c)
	}
	release(t, p)
}
