package core

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A pool keeps what is freed into it (release threshold "max", as
// PyTorch's and RMM's pools set it), and the driver's figure for the
// process, which the audit reads, counts it: the charge stays. An
// allocation from the pool reuses it without a second charge. A
// cuMemAlloc the quota would refuse trims the pool first and is allowed
// with what the pool let go of, so the job fills its quota and is never
// over it by the driver's figure (the audit, every 50 ms, leaves it be).
func TestPoolKeptMemoryCharged(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--audit-interval", "50ms"}})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "pthresh:max", "afill:100M:5", "freeall", "sync", "pinfo", "pid", "pause",
		"afill:100M:3", "pinfo", "pause",
		"freeall", "fill:100M", "pinfo", "sleep:400", "pause",
		"freeall", "sync", "pause")
	pid := int(p.Expect("pid").Int(t, "pid"))
	var slots [4][]uint64
	for i := range slots {
		p.Expect("paused")
		slots[i], _ = slotOf(t, l, pid)
		p.Send("")
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v (stopped by the audit?)\n%s", err, p.Output())
	}
	noStderr(t, "probe", p.Stderr())
	r := p.Result()
	pinfo := r.All("pinfo")
	if len(pinfo) != 3 {
		t.Fatalf("want 3 pinfo lines:\n%s", p.Output())
	}
	want := []struct {
		what           string
		slot           uint64
		reserved, used uint64
	}{
		{"500 MiB freed into the pool and kept", 500 * MiB, 500 * MiB, 0},
		{"300 MiB from what it kept", 500 * MiB, 500 * MiB, 300 * MiB},
		{"cuMemAlloc up to the quota, the pool trimmed", 1000 * MiB, 0, 0},
	}
	for i, w := range want {
		if len(slots[i]) == 0 || slots[i][0] != w.slot {
			t.Errorf("%s: slot charges %v, want %d MiB", w.what, slots[i], w.slot/MiB)
		}
		if pinfo[i].Uint(t, "reserved") != w.reserved || pinfo[i].Uint(t, "used") != w.used {
			t.Errorf("%s: %s, want reserved=%d used=%d", w.what, pinfo[i].Line, w.reserved, w.used)
		}
	}
	if f := r.Find(t, "fill", 0); f.Get("n") != "10" || f.Get("rc") != "2" {
		t.Errorf("%s: want 10 blocks of 100 MiB, then refused", f.Line)
	}
	if len(slots[3]) == 0 || slots[3][0] != 0 {
		t.Errorf("after the frees: slot charges %v, want 0", slots[3])
	}
}
