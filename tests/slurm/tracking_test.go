package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under cgroup v2 a job's task runs in the job's cgroup, where Slurm
// 22.05-25.11 put it: system.slice/slurmstepd.scope/job_<id>/step_<s>/
// user/task_<t> (<node>_slurmstepd.scope where Slurm is built for several
// slurmd per host, as Debian's is); 26.05 names the job's directory by
// its SLUID instead of job_<id>. A directory owned by root (what
// gpusliced's identity reads).
func TestJobCgroupLayout(t *testing.T) {
	c := needCluster(t)
	if !tracking.cgroup {
		t.Skip("the cluster runs without cgroups (GPUSLICE_SLURM_TRACKING=linuxproc)")
	}
	u := c.users["gsltest1"]
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "-w", c.nodes[0].Name, "--gpu-mem=1G",
		"sh", "-c", `grep '^0::' /proc/self/cgroup; stat -c 'owner=%u' "/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/../.."`))
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	id := jobID(t, r)
	want := regexp.MustCompile(`^0::/system\.slice/(` + regexp.QuoteMeta(c.nodes[0].Name) + `_)?slurmstepd\.scope/` +
		regexp.QuoteMeta(c.jobCgroupName(t, id)) + `/step_0/user/task_0$`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !want.MatchString(lines[0]) || lines[1] != "owner=0" {
		t.Errorf("task's cgroup and its job directory's owner:\n%s\nwant a line matching %s and owner=0", r.stdout, want)
	}
	c.assertReleased(t, id)
}

// A task's process that leaves its step's process tree (double fork and
// setsid, reparented to init) and drops the interceptor: under
// proctrack/cgroup it is still in its job's cgroup, so gpusliced's audit
// finds its job and stops it over the quota while the job runs. Under
// proctrack/linuxproc (docs/audit.md "What escapes") nothing finds it:
// Slurm does not end it with the job and gpusliced cannot tell its job,
// and this test shows that limit so the documentation stays true.
func TestDoubleForkEscape(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	n := c.nodes[0]
	dir, err := os.MkdirTemp(u.dir, "escape-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(u.uid), int(u.gid)); err != nil {
		t.Fatal(err)
	}
	pidFile, outFile := filepath.Join(dir, "pid"), filepath.Join(dir, "out")
	hold := "sleep 5"
	if tracking.cgroup {
		// The task lasts while the escaped process runs, at most 30 s:
		// long enough to see the audit act while the job runs.
		hold = `p=$(cat ` + pidFile + `); i=0; while [ $i -lt 300 ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; i=$((i+1)); done`
	}
	script := fmt.Sprintf(`( setsid env -u LD_PRELOAD %s --api driver --step 1G --count 2 --hold 60 >%s 2>&1 & echo $! >%s ); %s`,
		c.bin("target_app"), outFile, pidFile, hold)
	done := make(chan result, 1)
	go func() {
		done <- run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "-w", n.Name, "--gpu-mem=1G", "sh", "-c", script))
	}()
	var pid int
	if err := waitFor(30*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	}); err != nil {
		t.Fatalf("the escaping process did not start: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	held := func() error {
		b, _ := os.ReadFile(outFile)
		if strings.Count(string(b), "status=allowed") < 2 {
			return fmt.Errorf("the escaping process has not taken its 2 GiB yet:\n%s", b)
		}
		return nil
	}
	if tracking.cgroup {
		// Stopped by the audit while the job still runs (the task sleeps
		// 30 s): not by the job's end.
		if err := waitFor(20*time.Second, func() error {
			if syscall.Kill(pid, 0) == nil {
				return fmt.Errorf("process %d, out of its step's tree, still runs", pid)
			}
			return nil
		}); err != nil {
			b, _ := os.ReadFile(outFile)
			t.Fatalf("%v\n%s", err, b)
		}
		r := <-done
		id := jobID(t, r)
		c.assertReleased(t, id)
		h := c.history(t, id)
		if h.AuditKilled < 1 || len(h.Audit) == 0 || !strings.Contains(strings.Join(h.Audit, "\n"), "killed pid "+strconv.Itoa(pid)) {
			t.Errorf("report of job %s does not say the audit killed the escaped process %d: %+v", id, pid, h)
		}
		return
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	c.assertReleased(t, jobID(t, r))
	if err := waitFor(20*time.Second, held); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("under linuxproc the escaped process %d ended with its job; docs/audit.md says it survives", pid)
	}
}

// ConstrainDevices=yes closes the device files of GPUs a job was not
// given (Slurm's eBPF filter on the job's cgroup), and fakecuda, as
// NVIDIA's driver, cannot use a GPU whose device file it cannot open. A
// job that names each of the node's GPUs in CUDA_VISIBLE_DEVICES reaches
// only the one its quota is on; a job that asked for no GPU reaches none,
// whatever it sets.
func TestConstrainDevices(t *testing.T) {
	c := needCluster(t)
	if !tracking.cgroup {
		t.Skip("the cluster runs without cgroups (GPUSLICE_SLURM_TRACKING=linuxproc): nothing closes device files")
	}
	u := c.users["gsltest1"]
	n := c.nodes[0]
	gpus, err := n.gpus()
	if err != nil {
		t.Fatal(err)
	}
	// One line per GPU: its UUID, then what target_app saw with only it
	// visible.
	script := ""
	for _, g := range gpus {
		script += fmt.Sprintf(`echo "event=try uuid=%s"; CUDA_VISIBLE_DEVICES=%s %s --api driver --step 256M --count 1; `,
			g.UUID, g.UUID, c.bin("target_app"))
	}
	for _, tc := range []struct {
		name   string
		args   []string
		usable int
	}{
		{"quota on one GPU", []string{"--gpu-mem=1G"}, 1},
		{"no GPU", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"-v", "-w", n.Name}, tc.args...), "sh", "-c", script)
			r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", args...))
			usable, refused := 0, 0
			var uuid string
			for _, e := range events(r.stdout) {
				switch {
				case e["event"] == "try":
					uuid = e["uuid"]
				case e["event"] == "alloc" && e["status"] == "allowed":
					usable++
					t.Logf("GPU %s usable", uuid)
				case e["event"] == "error" && e["op"] == "init" && e["error"] == "CUDA_ERROR_NO_DEVICE":
					refused++
				}
			}
			if usable != tc.usable || usable+refused != len(gpus) {
				t.Errorf("%d GPUs usable and %d refused at init (CUDA_ERROR_NO_DEVICE), want %d usable of %d:\n%s",
					usable, refused, tc.usable, len(gpus), r.stdout)
			}
			if tc.args != nil { // a session only for the job with a quota
				c.assertReleased(t, jobID(t, r))
			}
		})
	}
}
