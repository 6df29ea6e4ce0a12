package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

// A refused session says which GPUs had no room, and the administrator's
// log can name the sessions holding it, largest first.
func TestRefusalNamesHolders(t *testing.T) {
	f := newFixture(t, "")
	for id, gib := range map[string]uint64{"41": 1, "43_1": 50, "42": 20} {
		if _, _, err := f.m.Create(api.SessionRequest{ID: id, QuotaBytes: gib << 30, GPUs: []string{"0"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := f.m.Create(api.SessionRequest{ID: "50", QuotaBytes: 20 << 30, GPUs: []string{"0"}})
	var r *Refusal
	if !errors.As(err, &r) || !errors.Is(err, api.ErrQuotaExceeded) || len(r.GPUs) != 1 || r.GPUs[0] != 0 {
		t.Fatalf("create past GPU 0's room: %v (%+v)", err, r)
	}
	if !strings.Contains(err.Error(), "committed to 3 other sessions") {
		t.Errorf("refusal: %v", err)
	}
	got := f.m.Holders(0, 2)
	if len(got) != 3 || !strings.HasPrefix(got[0], "43_1 50GiB since ") || !strings.HasPrefix(got[1], "42 20GiB since ") ||
		got[2] != "and 1 more" {
		t.Fatalf("holders of GPU 0: %q", got)
	}
	if h := f.m.Holders(1, 8); len(h) != 0 {
		t.Errorf("holders of GPU 1, which no session holds: %q", h)
	}
}
