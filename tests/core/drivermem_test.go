package core

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The driver holds memory for a process that no allocation entry point
// shows: on an H100, PyTorch's context grew 92-176 MiB past what a bare
// context costs (modules, library handles). fakecuda models it with
// FAKECUDA_MODULE_BYTES: each loaded module holds that much. gpusliced
// charges it to the process from the audit's figures, and a reservation
// near the limit waits for a pass, so a job that loads a module and at
// once fills its quota gets out-of-memory at the quota by the driver's
// figure, instead of being stopped by the audit (which is what happened
// before). The charge goes back when the process exits. (The sleep lets
// the audit read the session first: a reservation never waits for a
// pass before one has.)
func TestDriverMemoryCharged(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--audit-interval", "50ms"}})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID, "FAKECUDA_MODULE_BYTES="+strconv.FormatUint(200*MiB, 10))
	p := probe.Start(t, env, probe.Bin(t, "gs_probe"),
		"dev:0", "pid", "sleep:150", "modload", "fill:100M", "meminfo", "sleep:300", "pause")
	pid := int(p.Expect("pid").Int(t, "pid"))
	p.Expect("paused")
	held, _ := slotOf(t, l, pid)
	drv := l.Driver(0)
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v (stopped by the audit?)\n%s\ndaemon log:\n%s", err, p.Output(), d.Log())
	}
	noStderr(t, "probe", p.Stderr())
	r := p.Result()
	if m := r.Find(t, "modload", 0); m.Get("rc") != "0" {
		t.Fatalf("%s: want rc=0", m.Line)
	}
	// 1 GiB: the module (200 MiB), 8 blocks of 100 MiB (a context costs
	// nothing here)
	if f := r.Find(t, "fill", 0); f.Get("n") != "8" || f.Get("rc") != "2" {
		t.Errorf("%s: want 8 blocks of 100 MiB, then out of memory", f.Line)
	}
	if free := r.Find(t, "meminfo", 0).Uint(t, "free"); free != GiB-1000*MiB {
		t.Errorf("cuMemGetInfo free = %d MiB, want %d MiB", free/MiB, (GiB-1000*MiB)/MiB)
	}
	if len(held) == 0 || held[0] != 1000*MiB {
		t.Errorf("the process's slot holds %v, want 1000 MiB (its charges and the module's 200 MiB)", held)
	}
	if drv != 200*MiB {
		t.Errorf("driver memory charged: %d MiB, want 200 MiB", drv/MiB)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Used(0) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if u := l.Used(0); u != 0 {
		t.Errorf("after the process exited the ledger still holds %d bytes", u)
	}
}

// A reservation near the limit waits for the end of one pass begun after
// its ask, and that pass comes: with no periodic pass (an hour apart) the
// SHORT's pass alone ends the wait. The first process finds no pass has
// read the session and does not wait (its SHORT makes one); a later
// process waits for the pass its SHORT makes. (Each pass once counted one
// step and the wait asked for two: a later process waited its 200 ms
// out, at its first allocation near the limit.)
func TestSettleEndsWithOnePass(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--audit-interval", "1h"}})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 32 * MiB})
	env := sessionEnv(t, d, sess.ID, "GPUSLICE_DEBUG=1")
	for i, want := range []string{"", "gpuslice: settled on GPU 0"} {
		// attached until the pass its SHORT asked for has read it
		r := probe.Run(t, env, probe.Bin(t, "gs_probe"), "dev:0", "alloc:30M", "sleep:200")
		if rc := r.Find(t, "alloc", 0).Int(t, "rc"); rc != 0 {
			t.Fatalf("process %d: alloc rc=%d\n%s", i, rc, r.Stdout)
		}
		if strings.Contains(r.Stderr, "no audit pass") || !strings.Contains(r.Stderr, want) {
			t.Errorf("process %d near the limit: want %q, no timeout; stderr:\n%s", i, want, r.Stderr)
		}
	}
}
