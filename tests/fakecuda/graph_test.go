package fakecuda

import "testing"

// Graph memory nodes follow the driver's documented semantics (memory from
// the launch, held by the device's graph pool until trimmed), and a
// shareable handle imported in its own process is charged once.
func TestGraphMemoryAndImports(t *testing.T) {
	n := newNode(t, "1GiB")
	r := n.run(nil, "fc_graph")
	for _, c := range r.all("check") {
		if c["status"] != "ok" {
			t.Errorf("%s: %s", c["name"], c["status"])
		}
	}
	if s := r.one(t, "summary"); s["checks"] != "17" || r.code != 0 {
		t.Errorf("summary %v, exit %d\n%s%s", s, r.code, r.stdout, r.stderr)
	}
}
