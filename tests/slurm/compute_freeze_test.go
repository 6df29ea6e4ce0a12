package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Under real Slurm with cgroup v2: a job that goes around the launch gate
// (its process runs without the interceptor) beside a neighbour on the
// same GPU is held at its share and, as it keeps using the GPU, gpusliced
// freezes its task's cgroup (job_<id>/step_<s>/user/task_<t>), never the
// neighbour's; and a thaw by gpusliced never resumes a job Slurm
// suspended (scontrol suspend freezes the step's user directory above
// the task).
func TestBypassFrozenUnderSlurm(t *testing.T) {
	c := needCluster(t)
	if !tracking.cgroup {
		t.Skip("the cluster runs without cgroups (GPUSLICE_SLURM_TRACKING=linuxproc): nothing to freeze")
	}
	u := c.users["gsltest1"]
	n := c.nodes[0] // 2 x 16 GiB
	launcher := filepath.Join(c.build, "tests", "fakecuda", "fc_launcher")
	if _, err := os.Stat(launcher); err != nil {
		t.Fatalf("fc_launcher is not built (make fakecuda): %v", err)
	}
	// One GPU taken whole, so the two jobs share the other: weights 14/16
	// and 2/16 of it (the site's default, proportional to the quota).
	c.sbatch(t, u, "filler", "#!/bin/sh\nsleep 120\n", "-w", n.Name, "--gpu-mem=16G")
	fair := c.sbatch(t, u, "fair", "#!/bin/sh\nexec "+launcher+" 2 32\n", "-w", n.Name, "--gpu-mem=14G")
	cheat := c.sbatch(t, u, "cheat", "#!/bin/sh\nexec env -u LD_PRELOAD "+launcher+" 2 32\n", "-w", n.Name, "--gpu-mem=2G")
	logPath := c.path("log", "gpusliced-"+n.Name+".out")
	froze := regexp.MustCompile(`compute share: froze.*session=` + cheat + ` .*cgroup=(\S+)`)
	var task string
	if err := waitFor(60*time.Second, func() error {
		b, _ := os.ReadFile(logPath)
		m := froze.FindStringSubmatch(string(b))
		if m == nil {
			return fmt.Errorf("job %s, running without the interceptor beside job %s, not frozen", cheat, fair)
		}
		task = strings.Trim(m[1], `"`)
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, grepFile(logPath, "compute share"))
	}
	want := regexp.MustCompile(`/` + regexp.QuoteMeta(c.jobCgroupName(t, cheat)) + `/step_batch/user/task_0$`)
	if !want.MatchString(task) {
		t.Errorf("froze %s; want the batch step's task directory of job %s", task, cheat)
	}
	if strings.Contains(grepFile(logPath, "compute share: froze"), "session="+fair+" ") {
		t.Errorf("the neighbour launching through the gate was frozen:\n%s", grepFile(logPath, "froze"))
	}
	events := func() string {
		out, _ := n.command("cat", filepath.Join(task, "cgroup.events")).Output()
		return string(out)
	}
	freezeFile := func() string {
		out, _ := n.command("cat", filepath.Join(task, "cgroup.freeze")).Output()
		return strings.TrimSpace(string(out))
	}
	// Slurm suspends the job; gpusliced, which froze its task, thaws it
	// once the job no longer uses the GPU (its debt is paid): the job stays
	// suspended.
	if r := run(ctxFor(t, 30*time.Second), c.cmd(nil, "scontrol", "suspend", cheat)); r.code != 0 {
		t.Fatalf("scontrol suspend %s: %s", cheat, r)
	}
	if err := waitFor(60*time.Second, func() error {
		if freezeFile() != "0" {
			return fmt.Errorf("gpusliced has not thawed %s yet (cgroup.freeze %s)", task, freezeFile())
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, grepFile(logPath, "compute share"))
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("gpusliced froze %s, then thawed it while Slurm had the job suspended: cgroup.freeze %s, events %q",
		task, freezeFile(), events())
	if !strings.Contains(events(), "frozen 1") {
		t.Errorf("gpusliced's thaw resumed job %s, which Slurm had suspended: %s", cheat, events())
	}
	if r := run(ctxFor(t, 30*time.Second), c.cmd(nil, "scontrol", "resume", cheat)); r.code != 0 {
		t.Fatalf("scontrol resume %s: %s", cheat, r)
	}
	for _, id := range []string{cheat, fair} {
		_ = c.cmd(nil, "scancel", id).Run()
	}
}

func grepFile(path, s string) string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
