package identity

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The cgroup paths Slurm 22.05 to 26.05 give a job's tasks, as its cgroup
// plugins write them (src/plugins/cgroup/v1/cgroup_v1.c,
// src/plugins/cgroup/v2/cgroup_v2.c), each with the directories Slurm
// makes as root, and the same names made by a user in a subtree delegated
// to them.
func TestJobLayouts(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make root- and user-owned cgroup directories")
	}
	const (
		known   = "sEKNKTV3WPV500" // a SLUID a session was created with (job 2600)
		unknown = "s0ABCDEFGHJKMN" // well formed, no session has it
	)
	sessions := map[string]string{known: "2600"}
	type layout struct {
		name   string
		dirs   []string // root-owned, under the cgroup root (v2 at the root, v1 under the controller)
		user   string   // a user-owned directory, its ancestors root's
		cgroup string   // /proc/<pid>/cgroup
		job    string
	}
	const delegated = "user.slice/user-1000.slice/user@1000.service/app.slice/"
	layouts := []layout{
		{name: "v1", dirs: []string{"memory/slurm/uid_1000/job_55/step_0/task_0", "freezer/slurm/uid_1000/job_55/step_0"},
			cgroup: "12:memory:/slurm/uid_1000/job_55/step_0/task_0\n7:freezer:/slurm/uid_1000/job_55/step_0\n1:name=systemd:/system.slice/slurmd.service\n", job: "55"},
		{name: "v1 batch step", dirs: []string{"memory/slurm/uid_1000/job_56/step_batch/task_0"},
			cgroup: "4:memory:/slurm/uid_1000/job_56/step_batch/task_0\n", job: "56"},
		{name: "v1 MULTIPLE_SLURMD", dirs: []string{"memory/slurm_node2/uid_1000/job_57/step_0/task_1"},
			cgroup: "4:memory:/slurm_node2/uid_1000/job_57/step_0/task_1\n", job: "57"},
		{name: "v1 user-made job directory", dirs: []string{"memory/user.slice"}, user: "memory/user.slice/job_58",
			cgroup: "4:memory:/user.slice/job_58\n", job: ""},
		{name: "v2 22.05-25.11 step", dirs: []string{"system.slice/slurmstepd.scope/job_42/step_0/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n", job: "42"},
		{name: "v2 22.05-25.11 step_batch", dirs: []string{"system.slice/slurmstepd.scope/job_43/step_batch/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/job_43/step_batch/user/task_0\n", job: "43"},
		{name: "v2 22.05-25.11 step_extern", dirs: []string{"system.slice/slurmstepd.scope/job_44/step_extern/user/task_special"},
			cgroup: "0::/system.slice/slurmstepd.scope/job_44/step_extern/user/task_special\n", job: "44"},
		{name: "v2 22.05-25.11 step_interactive", dirs: []string{"system.slice/slurmstepd.scope/job_45/step_interactive/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/job_45/step_interactive/user/task_0\n", job: "45"},
		{name: "v2 MULTIPLE_SLURMD", dirs: []string{"system.slice/node2_slurmstepd.scope/job_46/step_0/user/task_0"},
			cgroup: "0::/system.slice/node2_slurmstepd.scope/job_46/step_0/user/task_0\n", job: "46"},
		{name: "v2 CgroupSlice=slurm.slice", dirs: []string{"slurm.slice/slurmstepd.scope/job_47/step_0/user/task_0"},
			cgroup: "0::/slurm.slice/slurmstepd.scope/job_47/step_0/user/task_0\n", job: "47"},
		{name: "v2 user-made job directory", dirs: []string{"user.slice/user-1000.slice/user@1000.service/app.slice"}, user: delegated + "job_48",
			cgroup: "0::/" + delegated + "job_48\n", job: ""},
		{name: "v2 26.05 SLUID", dirs: []string{"system.slice/slurmstepd.scope/" + known + "/step_0/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/" + known + "/step_0/user/task_0\n", job: "2600"},
		{name: "v2 26.05 SLUID step_extern", dirs: []string{"system.slice/slurmstepd.scope/" + known + "/step_extern/user/task_special"},
			cgroup: "0::/system.slice/slurmstepd.scope/" + known + "/step_extern/user/task_special\n", job: "2600"},
		{name: "v2 26.05 SLUID MULTIPLE_SLURMD", dirs: []string{"system.slice/node2_slurmstepd.scope/" + known + "/step_batch/user/task_0"},
			cgroup: "0::/system.slice/node2_slurmstepd.scope/" + known + "/step_batch/user/task_0\n", job: "2600"},
		{name: "v2 26.05 SLUID no session has", dirs: []string{"system.slice/slurmstepd.scope/" + unknown + "/step_0/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/" + unknown + "/step_0/user/task_0\n", job: ""},
		{name: "v2 26.05 SLUID not as Slurm prints it", dirs: []string{"system.slice/slurmstepd.scope/SEKNKTV3WPV500/step_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/SEKNKTV3WPV500/step_0\n", job: ""},
		{name: "v2 26.05 user-made SLUID directory", dirs: []string{"user.slice/user-1000.slice/user@1000.service/app.slice"}, user: delegated + known,
			cgroup: "0::/" + delegated + known + "\n", job: ""},
		{name: "v2 26.05 CgroupJobIdPaths=yes", dirs: []string{"system.slice/slurmstepd.scope/job_2601/step_0/user/task_0"},
			cgroup: "0::/system.slice/slurmstepd.scope/job_2601/step_0/user/task_0\n", job: "2601"},
	}
	for i, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			root := t.TempDir()
			cg := filepath.Join(root, "cgroup")
			for _, d := range l.dirs {
				if err := os.MkdirAll(filepath.Join(cg, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if l.user != "" {
				if err := os.Mkdir(filepath.Join(cg, l.user), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(filepath.Join(cg, l.user), 1000, 1000); err != nil {
					t.Fatal(err)
				}
			}
			pid := uint32(1000 + i)
			writeTree(t, root, []fakeProc{
				{pid: 1, ppid: 0, exe: "/sbin/init", uids: "0\t0\t0\t0", cmdline: "init", cgroup: "0::/init.scope\n"},
				{pid: pid, ppid: 1, exe: "/bin/sleep", uids: "1000\t1000\t1000\t1000", cmdline: "sleep", cgroup: l.cgroup},
			})
			r := Resolver{Proc: filepath.Join(root, "proc"), Cgroup: cg, SLUID: func(s string) string { return sessions[s] }}
			want := None
			if l.job != "" {
				want = ByCgroup
			}
			if job, how := r.Job(pid); job != l.job || how != want {
				t.Fatalf("Job = %q, %q; want %q, %q", job, how, l.job, want)
			}
			// Without the daemon's lookup no SLUID directory names a job.
			r.SLUID = nil
			if job, _ := r.Job(pid); l.job == "2600" && job != "" {
				t.Fatalf("without a SLUID lookup Job = %q; want none", job)
			}
		})
	}
}

// On a hybrid host (cgroup v1 controllers at /sys/fs/cgroup, cgroup2 at
// /sys/fs/cgroup/unified) a job's cgroup v2 directory is looked for under
// unified: real cgroup2 directories here, made and removed by the test.
func TestJobHybridHost(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make cgroup directories")
	}
	if V2Dir("/sys/fs/cgroup") != "unified" {
		t.Skip("not a hybrid host (cgroup2 is not at /sys/fs/cgroup/unified)")
	}
	const sluid = "s1AB2CD3EF4GH5"
	base := fmt.Sprintf("gpuslice-identity-%d-%d", os.Getpid(), time.Now().UnixNano())
	top := filepath.Join("/sys/fs/cgroup/unified", base)
	rel := []string{
		base + "/system.slice/slurmstepd.scope/job_71/step_0/user/task_0",
		base + "/system.slice/slurmstepd.scope/" + sluid + "/step_0/user/task_0",
		base + "/user.slice",
	}
	t.Cleanup(func() { removeCgroupTree(top) })
	for _, d := range rel {
		if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup/unified", d), 0o755); err != nil {
			t.Skipf("cannot make cgroup2 directories: %v", err)
		}
	}
	userDir := filepath.Join(top, "user.slice", "job_72")
	if err := os.Mkdir(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userDir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeTree(t, root, []fakeProc{
		{pid: 10, ppid: 1, exe: "/bin/sleep", uids: "1000\t1000\t1000\t1000", cmdline: "sleep",
			cgroup: "5:memory:/user.slice\n0::/" + rel[0] + "\n"},
		{pid: 11, ppid: 1, exe: "/bin/sleep", uids: "1000\t1000\t1000\t1000", cmdline: "sleep",
			cgroup: "5:memory:/user.slice\n0::/" + rel[1] + "\n"},
		{pid: 12, ppid: 1, exe: "/bin/sleep", uids: "1000\t1000\t1000\t1000", cmdline: "sleep",
			cgroup: "0::/" + base + "/user.slice/job_72\n"},
	})
	r := Resolver{Proc: filepath.Join(root, "proc"), Cgroup: "/sys/fs/cgroup",
		SLUID: func(s string) string { return map[string]string{sluid: "73"}[s] }}
	for pid, want := range map[uint32]string{10: "71", 11: "73", 12: ""} {
		if job, _ := r.Job(pid); job != want {
			t.Errorf("Job(%d) = %q; want %q", pid, job, want)
		}
	}
}

// removeCgroupTree removes cgroup directories deepest first (a cgroup
// directory is removed with rmdir, its files go with it).
func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}
