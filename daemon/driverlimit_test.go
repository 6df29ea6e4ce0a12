package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/daemon/store"
)

// The job's cgroup comes from the configuration and the session record
// (job id, SLUID from the Prolog), never from anything else.
func TestDriverLimitJobDir(t *testing.T) {
	d := &driverLimits{root: "/sys/fs/cgroup/system.slice/slurmstepd.scope"}
	for _, tc := range []struct {
		rec        store.Record
		jobIDPaths bool
		dir        string
	}{
		{store.Record{ID: "1234"}, false, "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_1234"},
		{store.Record{ID: "1234", SLUID: "sEKNKTV3WPV500"}, false, "/sys/fs/cgroup/system.slice/slurmstepd.scope/sEKNKTV3WPV500"},
		{store.Record{ID: "1234", SLUID: "sEKNKTV3WPV500"}, true, "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_1234"},
		{store.Record{ID: "run-h-77"}, false, ""}, // gpuslice run, an admin's session: no Slurm job
		{store.Record{ID: "12345678901"}, false, ""},
		{store.Record{ID: ".."}, false, ""},
	} {
		d.jobIDPaths = tc.jobIDPaths
		dir, ok := d.jobDir(tc.rec)
		if dir != tc.dir || ok != (tc.dir != "") {
			t.Errorf("jobDir(%+v, job id paths %v) = %q, %v; want %q", tc.rec, tc.jobIDPaths, dir, ok, tc.dir)
		}
	}
}

// dmem is enabled for the children of a cgroup that offers it, left
// alone where it is on already or not offered.
func TestEnableDmem(t *testing.T) {
	for _, tc := range []struct{ controllers, subtree, want string }{
		{"cpu memory dmem\n", "cpu memory\n", "+dmem"},
		{"cpu memory dmem\n", "memory dmem\n", "memory dmem\n"},
		{"cpu memory\n", "cpu\n", "cpu\n"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(tc.controllers), 0o644)
		os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(tc.subtree), 0o644)
		if err := enableDmem(dir); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); string(b) != tc.want {
			t.Errorf("controllers %q, subtree %q: subtree_control now %q; want %q", tc.controllers, tc.subtree, b, tc.want)
		}
	}
}
