package core

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The driver's own memory limit (NVML R615, modelled by fakecuda with
// FAKECUDA_MEMORY_LIMITS=1): gpusliced puts a job's quota on the job's
// cgroup, so a process of the job that runs without the interceptor is
// refused at allocation past the quota; the limit goes with the session,
// comes back after a restart, and a driver without the calls changes
// nothing. The Slurm cgroup root is a cgroup v2 directory the test makes.
func TestDriverMemoryLimit(t *testing.T) {
	root := slurmCgroupRoot(t)
	fcMemlimit := testenv.Artifact(t, "tests/fakecuda/fc_memlimit")
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB",
		ExtraEnv: []string{"FAKECUDA_MEMORY_LIMITS=1"}, ExtraArgs: []string{"--slurm-cgroup-root", root}})
	env := append(d.Env(), "FAKECUDA_MEMORY_LIMITS=1")
	c := d.Client()

	gpus, err := c.GPUs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if g.Enforcement != "driver+interceptor" {
			t.Fatalf("GPU %d enforcement %q; want driver+interceptor", g.Index, g.Enforcement)
		}
	}
	// run runs fc_memlimit's steps in cgroup dir ("" : the test's own).
	run := func(dir string, steps ...string) string {
		t.Helper()
		cmd := exec.Command(fcMemlimit, steps...)
		cmd.Env = env // no LD_PRELOAD: the interceptor is not there
		if dir != "" {
			fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fc_memlimit %v: %v\n%s", steps, err, out)
		}
		return string(out)
	}
	hard := func(dir string, dev int) string {
		t.Helper()
		out := run("", "get", fmt.Sprint(dev), dir)
		if i := strings.Index(out, "hard="); i >= 0 && strings.Contains(out, "result=0") {
			return strings.Fields(out[i+5:])[0]
		}
		return strings.TrimSpace(out)
	}
	const max = "18446744073709551615"

	s := newSession(t, d, client.SessionRequest{ID: "4242", UID: 1000, QuotaBytes: 1 * GiB, GPUs: []string{"0"}})
	for _, g := range s.GPUs {
		if g.Enforcement != "driver+interceptor" {
			t.Fatalf("session GPU enforcement %q", g.Enforcement)
		}
	}
	job := filepath.Join(root, "job_4242")
	if st, err := os.Stat(job); err != nil || !st.IsDir() {
		t.Fatalf("job cgroup %s not made: %v", job, err)
	}
	if h := hard(job, 0); h != fmt.Sprint(1*GiB) {
		t.Fatalf("GPU 0 hard limit %s; want the quota, 1 GiB", h)
	}
	if h := hard(job, 1); h != max {
		t.Fatalf("GPU 1 (not the job's) hard limit %s; want none", h)
	}

	t.Run("a process without the interceptor is refused by the driver", func(t *testing.T) {
		out := run(job, "alloc", "0", "768MiB", "alloc", "0", "512MiB", "alloc", "0", "256MiB")
		if got := allocResults(out); got != "0,2,0" {
			t.Fatalf("alloc results %s (768 MiB, 512 MiB past the quota, 256 MiB); want 0,2,0\n%s", got, out)
		}
		// Outside the job's cgroup the same allocations are not limited.
		if got := allocResults(run("", "alloc", "0", "768MiB", "alloc", "0", "512MiB")); got != "0,0" {
			t.Fatalf("outside the job's cgroup: %s; want 0,0", got)
		}
	})

	t.Run("a quota change moves the limit", func(t *testing.T) {
		q := 2 * GiB
		if _, err := c.PatchSession(ctx(t), "4242", client.PatchRequest{QuotaBytes: &q}); err != nil {
			t.Fatal(err)
		}
		if h := hard(job, 0); h != fmt.Sprint(2*GiB) {
			t.Fatalf("hard limit after the change %s; want 2 GiB", h)
		}
	})

	t.Run("set again after a restart", func(t *testing.T) {
		run("", "set", "0", job, "0", "max") // as if lost: cleared behind gpusliced's back
		if h := hard(job, 0); h != max {
			t.Fatalf("cleared limit reads %s", h)
		}
		d.Restart()
		if h := hard(job, 0); h != fmt.Sprint(2*GiB) {
			t.Fatalf("hard limit after restart %s; want 2 GiB", h)
		}
	})

	t.Run("a SLUID job's cgroup", func(t *testing.T) {
		newSession(t, d, client.SessionRequest{ID: "4243", UID: 1000, QuotaBytes: 3 * GiB, GPUs: []string{"1"}, SLUID: "sEKNKTV3WPV500"})
		dir := filepath.Join(root, "sEKNKTV3WPV500")
		if h := hard(dir, 1); h != fmt.Sprint(3*GiB) {
			t.Fatalf("hard limit on %s: %s; want 3 GiB", dir, h)
		}
		if _, err := os.Stat(filepath.Join(root, "job_4243")); err == nil {
			t.Fatal("job_4243 made for a job whose cgroup is its SLUID")
		}
		if _, err := c.DeleteSession(ctx(t), "4243"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%s left after the session", dir)
		}
	})

	t.Run("no limit left after the session", func(t *testing.T) {
		if _, err := c.DeleteSession(ctx(t), "4242"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(job); err == nil {
			t.Fatalf("%s left after the session", job)
		}
		// Slurm makes the job's cgroup again (a requeue): no limit on it.
		if err := os.Mkdir(job, 0o755); err != nil {
			t.Fatal(err)
		}
		if h := hard(job, 0); h != max {
			t.Fatalf("hard limit after the session %s; want none", h)
		}
		if got := allocResults(run(job, "alloc", "0", "1536MiB", "alloc", "0", "1GiB")); got != "0,0" {
			t.Fatalf("allocations after the session: %s; want 0,0", got)
		}
		os.Remove(job)
	})
	if !strings.Contains(d.Log(), "driver memory limit set") {
		t.Fatalf("gpusliced logged no limit set:\n%s", d.Log())
	}
}

// On a driver without the calls (fakecuda's state without
// FAKECUDA_MEMORY_LIMITS) every GPU is interceptor-only and sessions
// touch no cgroup.
func TestDriverMemoryLimitAbsent(t *testing.T) {
	root := slurmCgroupRoot(t)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "16GiB", ExtraArgs: []string{"--slurm-cgroup-root", root}})
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil || len(gpus) != 1 || gpus[0].Enforcement != "interceptor" {
		t.Fatalf("GPUs %+v, %v; want one, enforcement interceptor", gpus, err)
	}
	s := newSession(t, d, client.SessionRequest{ID: "4244", UID: 1000, QuotaBytes: 1 * GiB})
	if s.GPUs[0].Enforcement != "interceptor" {
		t.Fatalf("session GPU enforcement %q", s.GPUs[0].Enforcement)
	}
	if _, err := os.Stat(filepath.Join(root, "job_4244")); err == nil {
		t.Fatal("a job cgroup was made on a driver without memory limits")
	}

	// Identity through a SLUID end to end: a process of a Slurm 26.05 job
	// (in <root>/<SLUID>, as slurmstepd makes it) that runs without the
	// interceptor and goes past its quota is the job's, so the audit stops
	// it; the same in a directory of a SLUID no session has is no job's.
	const sluid = "s00000000000A1"
	newSession(t, d, client.SessionRequest{ID: "4245", UID: 1000, QuotaBytes: 1 * GiB, SLUID: sluid})
	fcMemlimit := testenv.Artifact(t, "tests/fakecuda/fc_memlimit")
	over := func(dir string) error {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(dir)
		fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		cmd := exec.Command(fcMemlimit, "alloc", "0", "1536MiB", "hold", "5")
		cmd.Env = d.Env()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		return cmd.Run()
	}
	if err := over(filepath.Join(root, sluid)); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("a process of the SLUID's job over its quota: %v; want killed by the audit", err)
	}
	// The audit logs once its kills are done: the process may be gone first.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(d.Log(), "processes killed as the OOM killer would\" session=4245"); {
		if time.Now().After(deadline) {
			t.Fatalf("the audit did not stop session 4245's process:\n%s", d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := over(filepath.Join(root, "s00000000000B2")); err != nil {
		t.Fatalf("a process under a SLUID no session has: %v; want left alone", err)
	}
}

// slurmCgroupRoot makes a cgroup v2 directory standing for Slurm's
// slurmstepd.scope (removed with what is under it at the end).
func slurmCgroupRoot(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (cgroup directories, NVML's set call)")
	}
	v2 := "/sys/fs/cgroup"
	var st syscall.Statfs_t
	if syscall.Statfs(v2, &st) != nil || st.Type != 0x63677270 {
		v2 = "/sys/fs/cgroup/unified"
		if syscall.Statfs(v2, &st) != nil || st.Type != 0x63677270 {
			t.Skip("no cgroup v2 hierarchy")
		}
	}
	root := filepath.Join(v2, fmt.Sprintf("gpuslice-core-%d-%d", os.Getpid(), time.Now().UnixNano()), "slurmstepd.scope")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v2 directory: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range []string{root, filepath.Dir(root)} {
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				if e.IsDir() {
					os.Remove(filepath.Join(d, e.Name()))
				}
			}
			os.Remove(d)
		}
	})
	return root
}

// allocResults is the result= of each event=alloc line, comma separated.
func allocResults(out string) string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "event=alloc result="); ok {
			r = append(r, rest)
		}
	}
	return strings.Join(r, ",")
}
