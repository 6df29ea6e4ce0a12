package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// auditNode is a node whose driver has no memory limits, where a task
// without the interceptor is stopped by gpusliced's audit (on the others
// the driver refuses its allocation first).
func (c *cluster) auditNode(t *testing.T) *node {
	t.Helper()
	for _, n := range c.nodes {
		if !n.DriverLimits {
			return n
		}
	}
	t.Fatal("every node's driver has memory limits: no node to show the audit on")
	return nil
}

// On a node whose driver has NVML's memory limits per cgroup (tn2:
// fakecuda with FAKECUDA_MEMORY_LIMITS=1), gpusliced says so (each GPU's
// enforcement, the node feature slurm-config prints) and puts each job's
// quota on the job's cgroup as the driver's hard limit: a task that drops
// the interceptor is refused at allocation by the driver, not killed after
// the fact, and no limit is left once the Epilog has run. The other node
// (tn1, a driver without the calls) is interceptor-only, as before
// (TestUnpreloadedTaskAuditedUnderSlurm runs there).
func TestDriverMemoryLimit(t *testing.T) {
	c := needCluster(t)
	if !tracking.cgroup {
		t.Skip("the cluster runs without cgroups (GPUSLICE_SLURM_TRACKING=linuxproc): the driver's limits are set on cgroups")
	}
	for _, n := range c.nodes {
		gpus, err := n.gpus()
		if err != nil {
			t.Fatal(err)
		}
		want := api.EnforcementInterceptor
		if n.DriverLimits {
			want = api.EnforcementDriver
		}
		for _, g := range gpus {
			if g.Enforcement != want {
				t.Errorf("%s GPU %d: enforcement %q, want %q", n.Name, g.Index, g.Enforcement, want)
			}
		}
		line, err := n.slurmConfig("node")
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(line, "Features=gpuslice_driver_limit"); has != n.DriverLimits {
			t.Errorf("%s: slurm-config's node line %q: feature gpuslice_driver_limit %v, want %v", n.Name, line, has, n.DriverLimits)
		}
	}

	u := c.users["gsltest1"]
	done := make(chan result, 1)
	go func() {
		// Placed by the feature, as an admin's users would ask for it.
		done <- run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--constraint=gpuslice_driver_limit", "--gpu-mem=2G", "sh", "-c",
			"exec env -u LD_PRELOAD "+c.bin("target_app")+" --api driver --step 1G --count 3 --hold 4"))
	}()
	// While the task holds its memory: the limit on the job's cgroup.
	var n *node
	var id string
	var held string
	if err := waitFor(60*time.Second, func() error {
		out, _ := c.cmd(nil, "squeue", "-h", "-u", u.name, "-t", "R", "-o", "%i %N").Output()
		f := strings.Fields(string(out))
		if len(f) != 2 {
			return fmt.Errorf("job not running yet: %q", out)
		}
		id, n = f[0], c.nodeByName(f[1])
		if n == nil || !n.DriverLimits {
			return fmt.Errorf("job %s runs on %s, not on a node with the feature", id, f[1])
		}
		name, err := c.jobCgroupNameNow(t, id)
		if err != nil {
			return err
		}
		held = n.limitsOf(t, filepath.Join(n.slurmCgroupRoot(), name))
		if !strings.Contains(held, fmt.Sprintf("hard=%d used=%d", 2*GiB, 2*GiB)) {
			return fmt.Errorf("job %s's cgroup limits: %s", id, held)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("srun (the task must end by itself, refused, not killed): %s", r)
	}
	app := parseApp(t, r.stdout)
	if app.allowed != 2 || app.denied != 1 || find(app.evs, "alloc", "status", "denied", "error", "CUDA_ERROR_OUT_OF_MEMORY") == nil {
		t.Errorf("allowed %d denied %d, want 2 allowed and the third refused with CUDA_ERROR_OUT_OF_MEMORY by the driver:\n%s",
			app.allowed, app.denied, r.stdout)
	}
	c.assertReleased(t, id)
	if h := c.history(t, id); h.AuditKilled != 0 {
		t.Errorf("job %s: the audit killed %d processes; the driver should have refused instead: %+v", id, h.AuditKilled, h)
	}
	// After the Epilog: the job's cgroup is gone, or holds no limit.
	// slurmstepd may remove it between the look and the driver's read (the
	// read then finds no such cgroup: result=6, NVML_ERROR_NOT_FOUND), so a
	// limit counts only when the directory is still there after the read.
	dir := filepath.Join(n.cg, strings.TrimPrefix(n.slurmCgroupRoot(), "/sys/fs/cgroup"), c.jobCgroupName(t, id))
	if _, err := os.Stat(dir); err == nil {
		l := n.limitsOf(t, filepath.Join(n.slurmCgroupRoot(), c.jobCgroupName(t, id)))
		if _, err := os.Stat(dir); err == nil && !strings.Contains(l, fmt.Sprintf("hard=%d ", ^uint64(0))) {
			t.Errorf("job %s's cgroup still has a limit after its Epilog: %s", id, l)
		}
	}
}

// limitsOf runs fakecuda's fc_memlimit on node n as root: the driver's
// limits on the cgroup at path (as the node sees it) on each GPU, one
// "event=get" line each.
func (n *node) limitsOf(t *testing.T, path string) string {
	t.Helper()
	gpus, err := n.gpus()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, g := range gpus {
		args = append(args, "get", fmt.Sprint(g.Index), path)
	}
	probe := filepath.Join(n.c.build, "tests", "fakecuda", "fc_memlimit")
	r := run(ctxFor(t, 30*time.Second), n.onNode(nil, probe, args...))
	if r.code != 0 {
		t.Fatalf("fc_memlimit on %s: %s", n.Name, r)
	}
	return r.stdout
}
