package session

import (
	"errors"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

// A PATCH of a session's GPU time share: what the compute controller reads
// (ComputeSessions) follows at once, "off" takes the session out of the
// sharing, a session without a share has its slot from its creation (so
// one given later reaches its running processes), a bad share changes
// nothing, and the share is kept across a restart.
func TestPatchCompute(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	var assigned []string
	f.m.opt.ComputeAssign = func(id string) { assigned = append(assigned, id) }
	changed := 0 // the controller is woken for a share, not for a session without one
	f.m.opt.ComputeChanged = func() { changed++ }
	if _, _, err := f.m.Create(api.SessionRequest{ID: "c", QuotaBytes: 1 << 30,
		Compute: &api.Compute{Mode: api.ComputePercent, Percent: 25}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "n", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if len(assigned) != 2 || assigned[0] != "c" || assigned[1] != "n" {
		t.Fatalf("slots assigned at creation: %v, want [c n] (a session without a share too)", assigned)
	}
	if changed != 1 {
		t.Fatalf("the controller was woken %d times for a session with a share and one without, want 1", changed)
	}
	specOf := func(id string) *api.Compute {
		for _, s := range f.m.ComputeSessions() {
			if s.ID == id {
				return &s.Spec
			}
		}
		t.Fatalf("session %s is not listed for the compute controller", id)
		return nil
	}
	if s := specOf("n"); s.Shared() {
		t.Fatalf("a session created without a share is listed with one: %+v", s)
	}

	v, err := f.m.Patch("c", api.PatchRequest{Compute: &api.Compute{Mode: api.ComputePercent, Percent: 70, MaxPercent: 80}})
	if err != nil {
		t.Fatal(err)
	}
	want := api.Compute{Mode: api.ComputePercent, Percent: 70, MaxPercent: 80}
	if v.Compute == nil || *v.Compute != want {
		t.Fatalf("session after PATCH: compute %+v, want %+v", v.Compute, want)
	}
	if s := specOf("c"); s == nil || *s != want {
		t.Fatalf("the controller reads %+v, want %+v", s, want)
	}
	if changed != 2 {
		t.Fatalf("the controller was woken %d times after a share's PATCH, want 2", changed)
	}
	if v.GPUs[0].LimitBytes != 1<<30 {
		t.Fatalf("a share PATCH changed the quota: %d", v.GPUs[0].LimitBytes)
	}

	for _, bad := range []api.Compute{{Mode: api.ComputePercent, Percent: 0}, {Mode: "most"}, {Mode: api.ComputeProportional, MaxPercent: 101}} {
		if _, err := f.m.Patch("c", api.PatchRequest{Compute: &bad}); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("PATCH compute %+v = %v, want a bad request", bad, err)
		}
	}
	if s := specOf("c"); s == nil || *s != want {
		t.Fatalf("a refused PATCH changed the share: %+v", s)
	}

	if v, err = f.m.Patch("c", api.PatchRequest{Compute: &api.Compute{Mode: api.ComputeOff}}); err != nil || v.Compute != nil {
		t.Fatalf("PATCH compute off = %+v, %v; want no share", v.Compute, err)
	}
	if s := specOf("c"); s.Shared() {
		t.Fatalf("the controller still shares a session whose share was removed: %+v", s)
	}

	if _, err = f.m.Patch("n", api.PatchRequest{Compute: &api.Compute{Mode: api.ComputeProportional}}); err != nil {
		t.Fatal(err)
	}
	if s := specOf("n"); s.Mode != api.ComputeProportional {
		t.Fatalf("a share given to a session that had none: the controller reads %+v", s)
	}

	f.close()
	f = newFixture(t, dir)
	if err := f.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if s, err := f.m.Get("n"); err != nil || s.Compute == nil || s.Compute.Mode != api.ComputeProportional {
		t.Fatalf("after a restart: session n's share %+v (%v), want proportional", s.Compute, err)
	}
	if s, err := f.m.Get("c"); err != nil || s.Compute != nil {
		t.Fatalf("after a restart: session c's share %+v (%v), want none", s.Compute, err)
	}
}
