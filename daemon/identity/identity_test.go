package identity

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

type fakeProc struct {
	pid, ppid uint32
	exe       string
	uids      string // "Uid:" line values
	cmdline   string
	cgroup    string
}

func writeTree(t *testing.T, root string, procs []fakeProc) {
	t.Helper()
	for _, p := range procs {
		d := filepath.Join(root, "proc", itoa(p.pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "stat"), []byte(itoa(p.pid)+" (x y) S "+itoa(p.ppid)+" 1 1 0 -1\n"), 0o644)
		os.WriteFile(filepath.Join(d, "status"), []byte("Name:\tx\nUid:\t"+p.uids+"\nGid:\t0\t0\t0\t0\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(p.cmdline+"\x00"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup"), []byte(p.cgroup), 0o644)
		if p.exe != "" {
			os.Symlink(p.exe, filepath.Join(d, "exe"))
		}
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func TestJob(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make root- and user-owned cgroup directories")
	}
	root := t.TempDir()
	cg := filepath.Join(root, "cgroup")
	// Slurm's cgroup v2 tree (root-owned) and a user-delegated subtree
	// where the user made a job_77 directory of their own.
	os.MkdirAll(filepath.Join(cg, "system.slice/slurmstepd.scope/job_42/step_0/user/task_0"), 0o755)
	os.MkdirAll(filepath.Join(cg, "user.slice/user-1000.slice/user@1000.service/app.slice/job_77"), 0o755)
	os.Chown(filepath.Join(cg, "user.slice/user-1000.slice/user@1000.service/app.slice/job_77"), 1000, 1000)
	os.MkdirAll(filepath.Join(cg, "memory/slurm/uid_1000/job_55/step_batch"), 0o755)
	// gpuslice run's cgroup (root's), and one a user made in their subtree.
	os.MkdirAll(filepath.Join(cg, "gpuslice-run-run-h-77"), 0o755)
	os.MkdirAll(filepath.Join(cg, "user.slice/user-1000.slice/user@1000.service/gpuslice-run-victim"), 0o755)
	os.Chown(filepath.Join(cg, "user.slice/user-1000.slice/user@1000.service/gpuslice-run-victim"), 1000, 1000)
	const rootUIDs, userUIDs = "0\t0\t0\t0", "1000\t1000\t1000\t1000"
	stepd := "/usr/sbin/slurmstepd"
	writeTree(t, root, []fakeProc{
		{pid: 1, ppid: 0, exe: "/sbin/init", uids: rootUIDs, cmdline: "init", cgroup: "0::/init.scope\n"},
		// a step: slurmstepd (root) -> bash (user) -> python (user)
		{pid: 100, ppid: 1, exe: stepd, uids: rootUIDs, cmdline: "slurmstepd: [1234.0]", cgroup: "0::/system.slice/slurmd.service\n"},
		{pid: 101, ppid: 100, exe: "/bin/bash", uids: userUIDs, cmdline: "bash", cgroup: "0::/system.slice/slurmd.service\n"},
		{pid: 102, ppid: 101, exe: "/usr/bin/python3", uids: userUIDs, cmdline: "python3", cgroup: "0::/system.slice/slurmd.service\n"},
		// a user process titled like a slurmstepd, running as the user
		{pid: 200, ppid: 1, exe: stepd, uids: userUIDs, cmdline: "slurmstepd: [9999.0]", cgroup: "0::/user.slice\n"},
		{pid: 201, ppid: 200, exe: "/bin/sh", uids: userUIDs, cmdline: "sh", cgroup: "0::/user.slice\n"},
		// a root process with the right title but another executable
		{pid: 300, ppid: 1, exe: "/usr/bin/python3", uids: rootUIDs, cmdline: "slurmstepd: [8888.0]", cgroup: "0::/\n"},
		{pid: 301, ppid: 300, exe: "/bin/sh", uids: userUIDs, cmdline: "sh", cgroup: "0::/\n"},
		// setuid root binary: real uid is the user's
		{pid: 400, ppid: 1, exe: stepd, uids: "1000\t0\t0\t0", cmdline: "slurmstepd: [7777.0]", cgroup: "0::/\n"},
		{pid: 401, ppid: 400, exe: "/bin/sh", uids: userUIDs, cmdline: "sh", cgroup: "0::/\n"},
		// proctrack/cgroup: the cgroup decides even when reparented to init
		{pid: 500, ppid: 1, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n"},
		// a user-made job_77 cgroup in a delegated subtree does not count
		{pid: 600, ppid: 1, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_77\n"},
		// cgroup v1
		{pid: 700, ppid: 1, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "4:memory:/slurm/uid_1000/job_55/step_batch\n1:name=systemd:/user.slice\n"},
		// Debian's slurmstepd (alternatives: /usr/sbin/slurmstepd-wlm)
		{pid: 900, ppid: 1, exe: "/usr/sbin/slurmstepd-wlm", uids: rootUIDs, cmdline: "slurmstepd: [1.0]", cgroup: "0::/\n"},
		{pid: 901, ppid: 900, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "0::/\n"},
		// gpuslice run: the command, and a process that escaped its tree
		{pid: 1000, ppid: 1, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "0::/gpuslice-run-run-h-77\n"},
		{pid: 1001, ppid: 1, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep", cgroup: "0::/user.slice/user-1000.slice/user@1000.service/gpuslice-run-victim\n"},
		// batch step
		{pid: 800, ppid: 1, exe: stepd + " (deleted)", uids: rootUIDs, cmdline: "slurmstepd: [1300.batch]", cgroup: "0::/\n"},
		{pid: 801, ppid: 800, exe: "/bin/bash", uids: userUIDs, cmdline: "bash", cgroup: "0::/\n"},
	})
	r := Resolver{Proc: filepath.Join(root, "proc"), Cgroup: cg}
	tests := []struct {
		name string
		pid  uint32
		job  string
		how  How
	}{
		{"step task", 101, "1234", ByStepd},
		{"grandchild of the step", 102, "1234", ByStepd},
		{"user process titled slurmstepd", 201, "", None},
		{"root process that is not slurmstepd", 301, "", None},
		{"setuid slurmstepd copy", 401, "", None},
		{"cgroup v2 job", 500, "42", ByCgroup},
		{"user-made job cgroup", 600, "", None},
		{"cgroup v1 job", 700, "55", ByCgroup},
		{"batch step", 801, "1300", ByStepd},
		{"gpuslice run's cgroup", 1000, "run-h-77", ByCgroup},
		{"user-made gpuslice-run cgroup", 1001, "", None},
		{"Debian slurmstepd-wlm", 901, "1", ByStepd},
		{"init", 1, "", None},
		{"gone", 12345, "", None},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job, how := r.Job(tc.pid)
			if job != tc.job || how != tc.how {
				t.Fatalf("Job(%d) = %q, %q; want %q, %q", tc.pid, job, how, tc.job, tc.how)
			}
		})
	}
}

func TestParseStepdTitle(t *testing.T) {
	for title, want := range map[string]string{
		"slurmstepd: [1234.0]":          "1234",
		"slurmstepd: [1234.batch]":      "1234",
		"slurmstepd: [1234.extern]":     "1234",
		"slurmstepd: [1234.4294967292]": "1234",
		"slurmstepd: [abc.0]":           "",
		"slurmstepd: [.0]":              "",
		"slurmstepd: [1234.0":           "",
		"slurmstepd:[1234.0]":           "",
		"slurmd":                        "",
		"":                              "",
	} {
		if got := ParseStepdTitle(title); got != want {
			t.Errorf("ParseStepdTitle(%q) = %q, want %q", title, got, want)
		}
	}
}

// statLine is a /proc/<pid>/stat line with every field up to the start
// time (field 22).
func statLine(pid, ppid uint32, start uint64) string {
	return itoa(pid) + " (x y) S " + itoa(ppid) + " 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 " +
		strconv.FormatUint(start, 10) + " 1000 10\n"
}

// The cache answers for an ancestor known by pid and start time; the same
// pid with another start time (a later process) is walked again.
func TestJobCache(t *testing.T) {
	root := t.TempDir()
	const rootUIDs, userUIDs = "0\t0\t0\t0", "1000\t1000\t1000\t1000"
	writeTree(t, root, []fakeProc{
		{pid: 1, ppid: 0, exe: "/sbin/init", uids: rootUIDs, cmdline: "init"},
		{pid: 100, ppid: 1, exe: "/usr/sbin/slurmstepd", uids: rootUIDs, cmdline: "slurmstepd: [1234.0]"},
		{pid: 101, ppid: 100, exe: "/bin/bash", uids: userUIDs, cmdline: "bash"},
		{pid: 102, ppid: 101, exe: "/usr/bin/python3", uids: userUIDs, cmdline: "python3"},
		{pid: 103, ppid: 101, exe: "/usr/bin/python3", uids: userUIDs, cmdline: "python3"},
		{pid: 200, ppid: 1, exe: "/bin/bash", uids: userUIDs, cmdline: "bash"},
		{pid: 201, ppid: 200, exe: "/bin/sleep", uids: userUIDs, cmdline: "sleep"},
	})
	proc := filepath.Join(root, "proc")
	setStat := func(pid, ppid uint32, start uint64) {
		if err := os.WriteFile(filepath.Join(proc, itoa(pid), "stat"), []byte(statLine(pid, ppid, start)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range [][3]uint32{{1, 0, 1}, {100, 1, 50}, {101, 100, 60}, {102, 101, 70}, {103, 101, 71}, {200, 1, 80}, {201, 200, 90}} {
		setStat(p[0], p[1], uint64(p[2]))
	}
	c := NewCache()
	r := Resolver{Proc: proc, Cgroup: filepath.Join(root, "cgroup"), Cache: c}
	if job, how := r.Job(102); job != "1234" || how != ByStepd {
		t.Fatalf("Job(102) = %q, %q; want 1234 by slurmstepd", job, how)
	}
	if job, _ := r.Job(201); job != "" {
		t.Fatalf("Job(201) = %q; want none", job)
	}
	if c.Len() != 3 { // 101 and 100 (job 1234), 200 (none)
		t.Fatalf("cache holds %d ancestors, want 3", c.Len())
	}
	// The step's slurmstepd is not read again for a sibling: its title
	// changed on disk, the remembered answer stands.
	os.WriteFile(filepath.Join(proc, "100", "cmdline"), []byte("slurmstepd: [9999.0]\x00"), 0o644)
	if job, _ := r.Job(103); job != "1234" {
		t.Fatalf("Job(103) = %q; want 1234 (from the cache)", job)
	}
	// pid 101 reused by a process with another start time whose parent is
	// the user's shell outside the job: not the cached ancestor.
	setStat(101, 200, 61)
	if job, _ := r.Job(102); job != "" {
		t.Fatalf("Job(102) under a reused parent pid = %q; want none", job)
	}
	// Without a cache the title read now counts.
	setStat(101, 100, 60)
	if job, _ := (Resolver{Proc: proc, Cgroup: r.Cgroup}).Job(103); job != "9999" {
		t.Fatalf("uncached Job(103) = %q; want 9999", job)
	}
}
