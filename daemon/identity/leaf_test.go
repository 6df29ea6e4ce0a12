package identity

import (
	"os"
	"path/filepath"
	"testing"
)

// Leaf gives the directory a job's task runs in, which may be frozen:
// never the job's own directory, slurmstepd's, a directory outside a job,
// or one a user made.
func TestLeaf(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make root- and user-owned cgroup directories")
	}
	const sluid = "sEKNKTV3WPV500"
	const delegated = "user.slice/user-1000.slice/user@1000.service/app.slice/"
	root := t.TempDir()
	cg := filepath.Join(root, "cgroup")
	for _, d := range []string{
		"system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
		"system.slice/slurmstepd.scope/job_42/step_0/slurm",
		"system.slice/slurmstepd.scope/" + sluid + "/step_batch/user/task_0",
		"gpuslice-run-r1",
		"user.slice/user-1000.slice/session-3.scope",
		"user.slice/user-1000.slice/user@1000.service/app.slice",
	} {
		if err := os.MkdirAll(filepath.Join(cg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{delegated + "job_48/sub", delegated + "gpuslice-run-r2"} {
		os.MkdirAll(filepath.Join(cg, d), 0o755)
		os.Chown(filepath.Join(cg, d), 1000, 1000)
		os.Chown(filepath.Join(cg, filepath.Dir(d)), 1000, 1000)
	}
	for _, tc := range []struct {
		name, cgroup, job, dir string
	}{
		{"task", "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n", "42", "system.slice/slurmstepd.scope/job_42/step_0/user/task_0"},
		{"slurmstepd", "0::/system.slice/slurmstepd.scope/job_42/step_0/slurm\n", "", ""},
		{"the job's own directory", "0::/system.slice/slurmstepd.scope/job_42\n", "", ""},
		{"26.05 SLUID", "0::/system.slice/slurmstepd.scope/" + sluid + "/step_batch/user/task_0\n", "2600", "system.slice/slurmstepd.scope/" + sluid + "/step_batch/user/task_0"},
		{"gpuslice run", "0::/gpuslice-run-r1\n", "r1", "gpuslice-run-r1"},
		{"login session", "0::/user.slice/user-1000.slice/session-3.scope\n", "", ""},
		{"user-made job directory", "0::/" + delegated + "job_48/sub\n", "", ""},
		{"user-made run directory", "0::/" + delegated + "gpuslice-run-r2\n", "", ""},
		{"cgroup v1 only", "4:freezer:/slurm/uid_1000/job_55/step_0\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeTree(t, root, []fakeProc{{pid: 500, ppid: 1, uids: "1000\t1000\t1000\t1000", cgroup: tc.cgroup}})
			r := Resolver{Proc: filepath.Join(root, "proc"), Cgroup: cg, SLUID: func(s string) string {
				if s == sluid {
					return "2600"
				}
				return ""
			}}
			job, dir := r.Leaf(500)
			want := ""
			if tc.dir != "" {
				want = filepath.Join(cg, tc.dir)
			}
			if job != tc.job || dir != want {
				t.Errorf("Leaf = %q, %q; want %q, %q", job, dir, tc.job, want)
			}
		})
	}
}
