package fakecuda

import "testing"

// Stream-ordered pools keep what is freed into them until a
// synchronisation gives back what is above the release threshold, or a
// trim; the device's free memory counts what they keep; with
// FAKECUDA_POOL_RESERVE=0 a free gives back at once.
func TestPoolsKeepFreedMemory(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    []string
		args   []string
		checks string
	}{
		{"model", nil, nil, "13"},
		{"FAKECUDA_POOL_RESERVE=0", []string{"FAKECUDA_POOL_RESERVE=0"}, []string{"nokeep"}, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t, "1GiB")
			r := n.run(c.env, "fc_pool", c.args...)
			for _, ch := range r.all("check") {
				if ch["status"] != "ok" {
					t.Errorf("%s: %s", ch["name"], ch["status"])
				}
			}
			if s := r.one(t, "summary"); s["checks"] != c.checks || r.code != 0 {
				t.Errorf("summary %v, exit %d\n%s%s", s, r.code, r.stdout, r.stderr)
			}
		})
	}
}
