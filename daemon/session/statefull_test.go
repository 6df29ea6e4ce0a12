package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The state directory's filesystem full (the soak's state-full fault):
// the Epilog's delete still releases the session at once (its memory
// given back, the report for the accounting), and what could not be
// written is written once there is room, also across a restart (the
// session does not come back). The soak found sessions kept past their
// jobs' end for as long as the filesystem stayed full, and their figures
// never recorded ("persist release: ... no space left on device").
func TestReleaseWithStateFull(t *testing.T) {
	dir, fill, free := testenv.FullDir(t, "4m")
	f := newFixture(t, dir)
	// Sessions enough that their reports need pages the database has
	// not written yet: the filesystem has none to give.
	const n = 300
	for i := 0; i < n; i++ {
		if _, _, err := f.m.Create(api.SessionRequest{ID: fmt.Sprintf("job-%d", i), QuotaBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	var rep api.Report
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("job-%d", i)
		r, err := f.m.Delete(id)
		if err != nil {
			t.Fatalf("delete of %s (%d of %d) with the state filesystem full: %v", id, i+1, n, err)
		}
		if _, err := f.m.Get(id); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("session %s is still there after its delete: %v", id, err)
		}
		rep = r
	}
	last := fmt.Sprintf("job-%d", n-1)
	if rep.ID != last || len(rep.GPUs) != len(gpus) {
		t.Errorf("report %+v", rep)
	}
	for _, g := range f.m.Inventory() {
		if g.CommittedBytes != 0 || g.Sessions != 0 {
			t.Errorf("GPU %d: %d bytes committed to %d sessions after the delete", g.Index, g.CommittedBytes, g.Sessions)
		}
	}
	if got, err := f.m.History(last); err != nil || got.ID != last {
		t.Errorf("history before the release is written: %+v, %v", got, err)
	}
	f2 := freedAndRestarted(t, f, dir, free)
	if l := f2.m.List(); len(l) != 0 {
		t.Errorf("%d released sessions came back after a restart (%s, ...)", len(l), l[0].ID)
	}
	if got, err := f2.m.History(last); err != nil || got.ID != last {
		t.Errorf("history after a restart: %+v, %v", got, err)
	}
}

// A job that starts while the state directory's filesystem is full gets
// its session all the same (the soak's state-full fault: the Prolog's
// create failed with "persist session: ... no space left on device", and
// Slurm drained the node); its record is written once there is room, so
// a restart after that finds it.
func TestCreateWithStateFull(t *testing.T) {
	dir, fill, free := testenv.FullDir(t, "4m")
	f := newFixture(t, dir)
	fill()
	const n = 300
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("job-%d", i)
		if _, _, err := f.m.Create(api.SessionRequest{ID: id, QuotaBytes: 1 << 20}); err != nil {
			t.Fatalf("create of %s (%d of %d) with the state filesystem full: %v", id, i+1, n, err)
		}
		if _, err := f.m.Get(id); err != nil {
			t.Fatalf("session %s after its create: %v", id, err)
		}
	}
	f.m.Sweep() // still full: nothing written, nothing lost
	if l := f.m.List(); len(l) != n {
		t.Fatalf("%d sessions live after a sweep with the filesystem full, want %d", len(l), n)
	}
	f2 := freedAndRestarted(t, f, dir, free)
	if l := f2.m.List(); len(l) != n {
		t.Errorf("%d of the %d sessions created while the filesystem was full came back after a restart", len(l), n)
	}
}

// freedAndRestarted frees the filesystem, lets f's manager sweep once,
// closes it and restores a new one from the same directory.
func freedAndRestarted(t *testing.T, f *fixture, dir string, free func()) *fixture {
	t.Helper()
	free()
	f.m.Sweep()
	f.close()
	f2 := newFixture(t, dir)
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	return f2
}
