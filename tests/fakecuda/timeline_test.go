package fakecuda

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// timelineNode is a node whose GPU timeline file is removed with its state.
func timelineNode(t *testing.T) *node {
	n := newNode(t, "1GiB")
	t.Cleanup(func() { os.Remove(n.statePath() + "@timeline") })
	return n
}

func doneMs(t *testing.T, r result) float64 {
	t.Helper()
	ms, err := strconv.ParseFloat(r.one(t, "done")["ms"], 64)
	if err != nil || r.code != 0 {
		t.Fatalf("load: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return ms
}

// Kernels take their modelled time on the GPU: streams and events wait for
// it and time it, cuLaunchKernelEx and cuCtxSynchronize take part, and NVML's
// per-process samples add up to the time the process ran.
func TestTimelineOneProcess(t *testing.T) {
	n := timelineNode(t)
	r := n.run(nil, "fc_timeline")
	for _, c := range r.all("check") {
		if c["status"] != "ok" {
			t.Errorf("%s: %s", c["name"], c["status"])
		}
	}
	if s := r.one(t, "summary"); s["checks"] != "12" || r.code != 0 {
		t.Errorf("summary %v, exit %d\n%s%s", s, r.code, r.stdout, r.stderr)
	}
}

// Two processes share the GPU in time slices: 50 ms of work queued behind a
// neighbour's full second completes in about twice its own time (the
// neighbour keeps its half), not after the neighbour's second as on a
// first-come GPU.
func TestTimelineTimeSlices(t *testing.T) {
	n := timelineNode(t)
	a := n.start(nil, "queued", "fc_timeline", "load", "10", "100")
	ms := doneMs(t, n.run(nil, "fc_timeline", "load", "10", "5"))
	t.Logf("50 ms of work beside a busy neighbour: %.1f ms", ms)
	if ms < 95 || ms > 500 {
		t.Errorf("50 ms of work beside a neighbour with 1 s queued took %.1f ms of GPU time; want ~100 (time slices)", ms)
	}
	if code := a.wait(t); code != 0 {
		t.Errorf("neighbour exit %d", code)
	}
}

// A killed process's queued work leaves the GPU with it: the next process
// runs at once, not behind ten seconds of a dead process's kernels.
func TestTimelineKilledProcessWorkGone(t *testing.T) {
	n := timelineNode(t)
	a := n.start(nil, "queued", "fc_timeline", "load", "10", "1000")
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	ms := doneMs(t, n.run(nil, "fc_timeline", "load", "10", "5"))
	if ms > 55 {
		t.Errorf("50 ms of work after a killed neighbour took %.1f ms of GPU time; want 50", ms)
	}
}
