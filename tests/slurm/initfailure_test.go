package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// From Slurm 25.05 a required SPANK plugin whose init fails in slurmstepd
// drains the node unless the plugin exports slurm_spank_init_failure_mode;
// gpuslice's says ESPANK_JOB_FAILURE (spank/compat.h): the job fails and
// the node stays in service. The plugin's init fails on the node only
// (srun, sbatch and salloc read the same plugstack.conf and would refuse
// the job on the submit host): the batch job is submitted held with a
// good plugstack.conf, which is then given an argument the plugin
// refuses, and the job released; slurmstepd's init fails on it. (With a
// plugin that does not export the symbol, 26.05 drained tn1 and requeued
// the job.)
func TestInitFailureFailsJobNotNode(t *testing.T) {
	c := needCluster(t)
	if !slurm.jobFailureMode {
		t.Skipf("Slurm %s has no slurm_spank_init_failure_mode (25.05 on)", slurm.name)
	}
	u := c.users["gsltest1"]
	n := c.nodes[0]
	out := filepath.Join(u.dir, "initfail.out")
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --output=%s\necho ran\n", out)
	id := c.sbatch(t, u, "initfail", script, "-w", n.Name, "--gpu-mem=1G", "--hold")
	c.withPlugstack(t, "max=8X")
	if r := run(ctxFor(t, 30*time.Second), c.cmd(nil, "scontrol", "release", id)); r.code != 0 {
		t.Fatalf("scontrol release %s: %s", id, r)
	}
	// The job fails (it does not run), and no node is drained for it: a
	// node drained ends the wait at once (a job whose node failed is
	// requeued, and would only wait for its BeginTime).
	var j map[string]string
	if err := waitFor(2*time.Minute, func() error {
		if bad, err := c.drained(); err != nil || len(bad) > 0 {
			return nil
		}
		var err error
		if j, err = c.job(id); err != nil {
			return err
		}
		if j["JobState"] == "FAILED" {
			return nil
		}
		return fmt.Errorf("job %s is %s (%s)", id, j["JobState"], j["Reason"])
	}); err != nil {
		t.Fatal(err)
	}
	if bad, err := c.drained(); err != nil || len(bad) > 0 {
		node, _ := c.cmd(nil, "scontrol", "-o", "show", "node", n.Name).Output()
		t.Fatalf("the plugin's failed init on %s drained nodes %v (%v): %s", n.Name, bad, err, node)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("job %s ran its script: %s", id, readFile(t, out))
	}
	slurmd := readFile(t, c.path("log", "slurmd-"+n.Name+".log"))
	if !strings.Contains(slurmd, "plugstack.conf argument max=8X") {
		t.Errorf("slurmd's log on %s does not show the plugin's init failing on max=8X", n.Name)
	}
	// The node stays in service: idle once the job is gone, never drained
	// (sampled for a while: a drain comes with the step's end).
	if err := waitFor(time.Minute, func() error {
		st, err := c.nodeState(n.Name)
		if err != nil {
			return err
		}
		if st != "idle" {
			return fmt.Errorf("node %s is %q, want idle", n.Name, st)
		}
		return nil
	}); err != nil {
		node, _ := c.cmd(nil, "scontrol", "-o", "show", "node", n.Name).Output()
		t.Fatalf("%v\n%s", err, node)
	}
	for i := 0; i < 10; i++ {
		if bad, err := c.drained(); err != nil || len(bad) > 0 {
			t.Fatalf("job %s (%s, %s): drained nodes %v (%v)", id, j["JobState"], j["Reason"], bad, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("job %s: %s (%s); node %s idle", id, j["JobState"], j["Reason"], n.Name)
}
