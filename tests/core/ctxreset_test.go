package core

import (
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// checkpoint is what gs_ctxreset is expected to hold at one of its pauses.
type checkpoint struct {
	at  string
	mib uint64
}

// runCtxReset runs gs_ctxreset with args in a fresh session under quota
// and checks, at each pause, that the ledger (session and process slot)
// charges exactly what the program holds, which is what the driver says
// it holds and what want says; then that every call did what it should
// and that nothing was left for the daemon to reclaim at exit.
func runCtxReset(t *testing.T, d *testenv.Daemon, quota uint64, want []checkpoint, args ...string) probe.Result {
	t.Helper()
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_ctxreset"), args...)
	pid := p.Cmd.Process.Pid
	for _, w := range want {
		s := p.Expect("paused")
		held, driver := s.Uint(t, "held"), s.Uint(t, "driver")
		used := l.Used(0)
		slot, ok := slotOf(t, l, pid)
		if s.Get("at") != w.at {
			t.Fatalf("paused at %s, want %s\n%s", s.Get("at"), w.at, p.Output())
		}
		if w.mib != ^uint64(0) && held != w.mib*MiB {
			t.Errorf("at %s: the program holds %d, want %d MiB", w.at, held, w.mib)
		}
		if driver != held {
			t.Errorf("at %s: the driver says %d held, the program %d", w.at, driver, held)
		}
		if used != held || !ok || slot[0] != held {
			t.Errorf("at %s: ledger used %d, slot %v (attached %v); want %d, what the process holds",
				w.at, used, slot, ok, held)
		}
		p.Send("")
	}
	done := p.Expect("done")
	err := p.Wait()
	r := p.Result()
	if err != nil || done.Get("errors") != "0" {
		t.Errorf("gs_ctxreset %v: %v, %s\n%s", args, err, done.Line, p.Output())
	}
	noStderr(t, "gs_ctxreset", p.Stderr())
	probe.Eventually(t, 30*time.Second, "used back to 0 after exit", func() (bool, string) {
		return l.Used(0) == 0, "used " + strconv.FormatUint(l.Used(0), 10)
	})
	if l.Reclaimed(0) != 0 {
		t.Errorf("the daemon reclaimed %d bytes at exit, want 0 (the process gave everything back)", l.Reclaimed(0))
	}
	if pk := l.Peak(0); pk > quota {
		t.Errorf("peak %d over the quota %d", pk, quota)
	}
	return r
}

// Memory the driver frees with a context (a created context destroyed,
// the primary context reset or released for the last time, the runtime's
// cudaDeviceReset) is given back to the ledger at once: a job that resets
// its device and allocates the same again under a 256 MiB quota is
// admitted, and the ledger charges exactly what the driver holds.
// Stream-ordered (pool) and VMM memory belong to no context and stay
// charged until freed. Each entry point is run under both its names.
func TestContextTeardownGivesMemoryBack(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const set = 197 // MiB: cuMemAlloc, managed, pitched, array, mipmapped array
	ctx := []checkpoint{{"allocated", set + 18}, {"destroyed", 18}, {"again", set + 18}, {"end", 0}}
	reset := []checkpoint{{"allocated", set + 16}, {"reset", 16}, {"again", set + 16}, {"end", 0}}
	release := []checkpoint{{"allocated", set}, {"released_once", set}, {"freed", 0}, {"allocated_again", set},
		{"released", 0}, {"again", set}, {"end", 0}}
	tests := []struct {
		name string
		args []string
		want []checkpoint
	}{
		{"cuCtxDestroy_v2", []string{"ctx"}, ctx},
		{"cuCtxDestroy", []string{"ctx", "legacy"}, ctx},
		{"cuDevicePrimaryCtxReset_v2", []string{"reset"}, reset},
		{"cuDevicePrimaryCtxReset", []string{"reset", "legacy"}, reset},
		{"cuDevicePrimaryCtxRelease_v2", []string{"release"}, release},
		{"cuDevicePrimaryCtxRelease", []string{"release", "legacy"}, release},
		{"cudaDeviceReset", []string{"runtime"},
			[]checkpoint{{"allocated", 216}, {"reset", 16}, {"again", 216}, {"end", 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runCtxReset(t, d, 256*MiB, tc.want, tc.args...) })
	}
}

// Threads allocating and freeing in one context while the main thread
// allocates in other contexts and takes them down (cuCtxDestroy, primary
// reset, last primary release, 30 rounds): nothing is denied under a
// 256 MiB quota (each round's 104 MiB would be within three rounds if a
// torn-down context stayed charged), the ledger equals what the threads
// hold when they are paused, and 0 at the end. Exact whatever the
// interleaving: nothing here depends on the threads overlapping.
func TestContextTeardownWhileThreadsAllocate(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	r := runCtxReset(t, d, 256*MiB, []checkpoint{{"storm", ^uint64(0)}, {"end", 0}}, "storm", "4", "30")
	st := r.Find(t, "storm", 0)
	if st.Uint(t, "rounds") != 30 || st.Uint(t, "ops") < 30*4 {
		t.Errorf("%s: want 30 rounds and at least one operation per thread and round", st.Line)
	}
	var teardowns int
	for _, s := range r.All("step") {
		switch s.Get("name") {
		case "round_destroy", "round_reset", "round_release_last":
			teardowns++
		}
	}
	if teardowns != 30 {
		t.Errorf("%d contexts taken down, want 30", teardowns)
	}
}
