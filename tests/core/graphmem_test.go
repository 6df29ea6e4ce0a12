package core

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Graph memory nodes are charged when their memory exists: from the launch
// of the executable graph (not at cuGraphAddMemAllocNode), for as long as
// the device's graph pool holds it (a free node returns it to the pool;
// cuDeviceGraphMemTrim gives it back). A launch whose allocations do not
// fit the quota is refused before the driver allocates anything.
func TestGraphMemoryCharged(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 256 * MiB})
	l := openLedger(t, d, sess.ID)
	steps := []struct {
		step string
		rc   int64
		used uint64 // MiB charged afterwards
	}{
		{"dev:0", 0, 0},
		{"galloc:0:100M:free", 0, 0}, // a node allocates nothing
		{"glaunch", 0, 100},          // the pool now holds 100 MiB
		{"glaunch", 0, 100},          // reused from the pool
		{"gtrim:0", 0, 0},
		{"galloc:0:200M:keep", 0, 0},
		{"glaunch", 0, 200},      // live after the launch
		{"alloc:64M", oom, 200},  // the graph's memory counts against the quota
		{"gexecdestroy", 0, 200}, // freed to the pool, still held by it
		{"gtrim:0", 0, 0},
		{"galloc:0:300M:free", 0, 0},
		{"glaunch", oom, 0}, // would exceed the quota: refused
	}
	var args []string
	for _, s := range steps {
		args = append(args, s.step, "pause")
	}
	args = append(args, "gmem:0")
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), args...)
	for _, s := range steps {
		p.Expect("paused")
		if u := l.Used(0); u != s.used*MiB {
			t.Errorf("after %s: ledger used %d MiB, want %d", s.step, u/MiB, s.used)
		}
		p.Send("")
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("gs_probe: %v\n%s", err, p.Output())
	}
	r := p.Result()
	count := map[string]int{}
	for _, s := range steps {
		name := s.step
		for i, c := range name {
			if c == ':' {
				name = name[:i]
				break
			}
		}
		if rc := r.Find(t, name, count[name]).Int(t, "rc"); rc != s.rc {
			t.Errorf("%s: rc=%d, want %d\n%s", s.step, rc, s.rc, r.Stdout)
		}
		count[name]++
	}
	// the refused launch never reached the driver: its pool stayed empty
	if g := r.Find(t, "gmem", 0); g.Get("reserved") != "0" {
		t.Errorf("driver's graph pool after the refused launch: %s", g.Line)
	}
}
