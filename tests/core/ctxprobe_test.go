package core

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// measuredGPUs waits until the daemon's log, from byte from on, says the
// context cost of want GPUs was measured, and returns their indexes.
func measuredGPUs(t *testing.T, d *testenv.Daemon, from int, want int) []string {
	t.Helper()
	re := regexp.MustCompile(`msg="context cost measured" gpu=(\d+) uuid=\S+ bytes=(\d+)`)
	var got []string
	probe.Eventually(t, 10*time.Second, "context cost measured", func() (bool, string) {
		got = got[:0]
		for _, m := range re.FindAllStringSubmatch(d.Log()[from:], -1) {
			if m[2] != fmt.Sprint(64*MiB) {
				t.Fatalf("GPU %s: context cost %s bytes, want %d", m[1], m[2], 64*MiB)
			}
			got = append(got, m[1])
		}
		return len(got) >= want, fmt.Sprintf("measured: %v", got)
	})
	return got
}

// gpusliced measures what a context costs on each idle GPU itself (its
// context probe) and starts every new session's ledger with the figure:
// a job's first process charges its context at once, without loading
// NVML to measure it.
func TestDaemonMeasuresContextCost(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB", Devices: "2x80GiB", ContextProbe: true})
	if got := measuredGPUs(t, d, 0, 2); len(got) != 2 {
		t.Fatalf("measured GPUs %v, want 0 and 1", got)
	}
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if g.ContextCostBytes == nil || *g.ContextCostBytes != 64*MiB {
			t.Errorf("GPU %d in the admin API: context cost %v, want 64 MiB", g.Index, g.ContextCostBytes)
		}
	}
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	if c, ok := l.CtxCost(0); !ok || c != 64*MiB {
		t.Fatalf("new session's ledger: context cost %d (set %v), want 64 MiB", c, ok)
	}
	p, nvml := holdFirstAlloc(t, sessionEnv(t, d, sess.ID), 0)
	if nvml {
		t.Errorf("the session's first process loaded NVML; the daemon's figure should have spared it")
	}
	if u := l.Used(0); u != 66*MiB {
		t.Errorf("ledger used %d MiB with a context and 2 MiB, want 66", u/MiB)
	}
	release(t, p)
	probe.Eventually(t, 5*time.Second, "context reclaimed with its process", func() (bool, string) {
		u := l.Used(0)
		return u == 0, fmt.Sprintf("ledger used %d bytes", u)
	})
}

// The probe never creates a context on a GPU a session holds or a process
// uses (a job's memory is never put at risk by a measurement). Such a GPU
// has no figure, and a session there measures the cost in its first
// process, as without the probe.
func TestContextProbeLeavesBusyGPUsAlone(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB", Devices: "3x80GiB", ContextProbe: true})
	measuredGPUs(t, d, 0, 3)
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil || len(gpus) != 3 {
		t.Fatalf("GPUs: %v %+v", err, gpus)
	}
	// GPU 0: a session (kept over the restart); GPU 1: a process outside
	// any session; GPU 2: nothing.
	held := newSession(t, d, client.SessionRequest{ID: "probe-held", Quotas: map[string]uint64{gpus[0].UUID: GiB}})
	d.Stop()
	other, _ := holdFirstAlloc(t, d.Env(), 1)
	from := len(d.Log())
	d.Restart()
	measuredGPUs(t, d, from, 1)
	time.Sleep(500 * time.Millisecond) // a second line, if any, would be written by now
	got := measuredGPUs(t, d, from, 1)
	if len(got) != 1 || got[0] != "2" {
		t.Fatalf("measured GPUs %v after the restart, want only 2", got)
	}
	if !strings.Contains(d.Log()[from:], `msg="context cost not measured: GPU in use" gpu=1`) {
		t.Errorf("no line says GPU 1 was left alone because it is in use")
	}
	if now, err := d.Client().GPUs(ctx(t)); err != nil || now[0].ContextCostBytes != nil || now[1].ContextCostBytes != nil ||
		now[2].ContextCostBytes == nil {
		t.Errorf("admin API after the restart: %v; want a context cost for GPU 2 only", err)
	}

	// A new session on the busy GPU measures the cost in its first process.
	sess := newSession(t, d, client.SessionRequest{Quotas: map[string]uint64{gpus[1].UUID: GiB}})
	l := openLedger(t, d, sess.ID)
	if c, ok := l.CtxCost(0); ok {
		t.Fatalf("session on the busy GPU starts with a context cost (%d)", c)
	}
	p, nvml := holdFirstAlloc(t, sessionEnv(t, d, sess.ID), 1)
	if !nvml {
		t.Errorf("the first process on an unmeasured GPU did not load NVML to measure")
	}
	if c, ok := l.CtxCost(0); !ok || c != 64*MiB {
		t.Errorf("after the first process: context cost %d (set %v), want 64 MiB", c, ok)
	}
	release(t, p)
	release(t, other)
	if _, err := d.Client().DeleteSession(ctx(t), held.ID); err != nil {
		t.Fatal(err)
	}
}

// slowProbeDaemon starts gpusliced with the real context probe started
// delay late, and returns once the probe has begun.
func slowProbeDaemon(t *testing.T, delay string) *testenv.Daemon {
	t.Helper()
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	slow := filepath.Join(dir, "slow-probe")
	script := fmt.Sprintf("#!/bin/sh\n: >%s\nsleep %s\nexec %s \"$@\"\n", started, delay,
		testenv.Artifact(t, "bin/gpuslice-ctxprobe"))
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB", ContextProbe: true,
		ExtraArgs: []string{"--context-probe", slow}})
	probe.Eventually(t, 10*time.Second, "the probe started", func() (bool, string) {
		_, err := os.Stat(started)
		return err == nil, fmt.Sprint(err)
	})
	return d
}

// A session created on a GPU while the context probe measures it waits
// for the measurement: the probe's context is gone before the job's
// processes start, and the session starts with the figure. The wait is
// bounded (session.ProbeWait, under the Prolog's 5 s per call): a probe
// that takes longer delays no create past it.
func TestCreateWaitsForContextProbe(t *testing.T) {
	t.Run("probe ends first", func(t *testing.T) {
		d := slowProbeDaemon(t, "1")
		begin := time.Now()
		sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
		took := time.Since(begin)
		l := openLedger(t, d, sess.ID)
		if c, ok := l.CtxCost(0); !ok || c != 64*MiB {
			t.Fatalf("session created during the probe (in %v): context cost %d (set %v), want 64 MiB", took, c, ok)
		}
		if strings.Contains(d.Log(), "still holds a GPU") {
			t.Errorf("the create gave up waiting for the probe")
		}
	})
	t.Run("probe too slow", func(t *testing.T) {
		d := slowProbeDaemon(t, "30")
		begin := time.Now()
		newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
		// It waited for the probe, and gave up long before the probe's 30 s.
		if took := time.Since(begin); took < session.ProbeWait || took > 20*time.Second {
			t.Errorf("create took %v while the probe ran on, want %v and then no longer", took, session.ProbeWait)
		}
		if !strings.Contains(d.Log(), "still holds a GPU") {
			t.Errorf("no line says the create stopped waiting for the probe")
		}
	})
}
