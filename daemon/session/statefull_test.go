package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
	"golang.org/x/sys/unix"
)

// fullStateDir mounts a small tmpfs for the fixture's files and returns
// a function that fills it to the last byte and one that frees it again.
func fullStateDir(t *testing.T) (dir string, fill, free func()) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir = t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	fill = func() {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
		f.Close()
	}
	free = func() { _ = os.Remove(filler) }
	return dir, fill, free
}

// The state directory's filesystem full (the soak's state-full fault):
// the Epilog's delete still releases the session at once (its memory
// given back, the report for the accounting), and what could not be
// written is written once there is room, also across a restart (the
// session does not come back). The soak found sessions kept past their
// jobs' end for as long as the filesystem stayed full, and their figures
// never recorded ("persist release: ... no space left on device").
func TestReleaseWithStateFull(t *testing.T) {
	dir, fill, free := fullStateDir(t)
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
	free()
	f.m.Sweep()
	f.close()
	f2 := newFixture(t, dir)
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if l := f2.m.List(); len(l) != 0 {
		t.Errorf("%d released sessions came back after a restart (%s, ...)", len(l), l[0].ID)
	}
	if got, err := f2.m.History(last); err != nil || got.ID != last {
		t.Errorf("history after a restart: %+v, %v", got, err)
	}
}
