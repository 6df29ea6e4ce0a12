package core

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A thread fills its front of the pointer table with plain stores, without
// the handshake a flusher waits for (docs/charging.md "Tables"): the
// owner only fills empty entries, a flusher only empties entries it found
// filled. Here one thread allocates without pause and hands every other
// pointer to the main thread, whose releases flush that thread's front
// again and again: every pointer is found and given back, nothing fails,
// and the ledger comes back to exactly nothing allocated.
func TestFrontFilledWhileFlushed(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_handoff"), "1500", "65536")
	h := p.Expect("handoff")
	t.Log(h.Line)
	if h.Get("alloc_failed") != "0" || h.Get("free_failed") != "0" || h.Uint(t, "handed") < 1000 {
		t.Errorf("%s: want no failed call and pointers handed over", h.Line)
	}
	p.Expect("paused")
	if u, c := l.Used(0), l.Charged(0); u != 0 || c > GiB {
		t.Errorf("everything freed: ledger used %d (charged %d), want 0", u, c)
	}
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatalf("gs_handoff: %v\n%s", err, p.Output())
	}
	noStderr(t, "gs_handoff", p.Stderr())
	if r := l.Reclaimed(0); r != 0 {
		t.Errorf("the daemon reclaimed %d bytes at exit, want 0 (the process gave everything back)", r)
	}
}
