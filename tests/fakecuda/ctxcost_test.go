package fakecuda

import (
	"strconv"
	"strings"
	"testing"
)

// Every context costs device memory, as on a real GPU: it shows in the
// device's free memory and in the per-process usage NVML reports, and it is
// given back when the context goes (destroy, last detach, reset, last
// release). A context that does not fit is refused.
func TestContextCost(t *testing.T) {
	const mib = uint64(1) << 20
	const cost = 64 * mib
	n := newNode(t, "256MiB")
	n.ctxBytes = "64MiB"
	p := n.start(nil, "hold", "fc_ctxcost")
	steps := map[string]event{}
	for _, ev := range p.lines {
		if ev["event"] == "step" {
			steps[ev["name"]] = ev
		}
	}
	total := 256 * mib
	want := []struct {
		name   string
		result string
		held   uint64 // contexts alive afterwards
	}{
		{"retain", "0", 1}, {"retain2", "0", 1},
		{"create_v2", "0", 2}, {"create_v3", "0", 3}, {"create_v4", "0", 4},
		{"create_full", "2", 4},
		{"destroy", "0", 3}, {"attach", "0", 3}, {"detach1", "0", 3}, {"detach2", "0", 2},
		{"reset", "0", 1}, {"retain3", "0", 2},
		{"release1", "0", 2}, {"release2", "0", 2}, {"release3", "0", 1}, {"retain4", "0", 2},
	}
	for _, w := range want {
		ev, ok := steps[w.name]
		if !ok {
			t.Fatalf("no step %s in %v", w.name, p.lines)
		}
		free, _ := strconv.ParseUint(ev["free"], 10, 64)
		if ev["result"] != w.result || free != total-w.held*cost {
			t.Errorf("%s: result=%s free=%d MiB, want result=%s free=%d MiB", w.name, ev["result"], free/mib,
				w.result, (total-w.held*cost)/mib)
		}
	}
	// NVML: the process holds two contexts (the primary and create_v4's)
	q := n.run(nil, "nvml_query").ok(t)
	found := false
	for _, pr := range q.all("process") {
		if pr["pid"] == strconv.Itoa(p.pid()) {
			found = true
			if pr["used"] != strconv.FormatUint(2*cost, 10) {
				t.Errorf("NVML lists pid %d with %s bytes, want %d", p.pid(), pr["used"], 2*cost)
			}
		}
	}
	if !found {
		t.Errorf("NVML does not list pid %d: %v", p.pid(), q.all("process"))
	}
	if code := p.release(t); code != 0 {
		t.Fatalf("fc_ctxcost exit %d", code)
	}
	for _, m := range n.run(nil, "nvml_query").ok(t).all("memory") {
		if m["used"] != "0" {
			t.Errorf("after exit: %v", m)
		}
	}
}

// Without FAKECUDA_CTX_BYTES a context costs fakecuda's realistic default
// (300 MiB); a malformed value makes cuInit fail with one clear line.
func TestContextCostConfig(t *testing.T) {
	n := newNode(t, "1GiB")
	n.ctxBytes = "default"
	p := n.start(nil, "hold", "fc_ctxcost")
	var retain event
	for _, ev := range p.lines {
		if ev["event"] == "step" && ev["name"] == "retain" {
			retain = ev
		}
	}
	if retain == nil || retain["free"] != strconv.FormatUint(1<<30-300<<20, 10) {
		t.Errorf("free after one context with the default cost: %v, want %d", retain, uint64(1<<30-300<<20))
	}
	p.release(t)

	for _, bad := range []string{"lots", "-1", "1.5G", "2TiB", "12X"} {
		n.ctxBytes = bad
		r := n.run(nil, "fc_probe")
		ev := r.one(t, "init")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if ev["result"] == "0" || len(lines) != 1 || !strings.Contains(lines[0], "FAKECUDA_CTX_BYTES") {
			t.Errorf("FAKECUDA_CTX_BYTES=%s: init %v, stderr %q: want a failed cuInit and one line naming the variable",
				bad, ev, r.stderr)
		}
	}
}
