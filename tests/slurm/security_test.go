package slurm

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// A job's task that escapes the environment SPANK gave it still gets its
// job's quota under real Slurm: gpusliced finds the job from the task's
// process tree (its step's root slurmstepd), not from GPUSLICE_SESSION.
func TestEnvBypassUnderSlurm(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	n := c.nodes[0] // the job runs there, next to the session it names
	for _, tc := range []struct {
		name  string
		env   []string
		other bool
	}{
		{"GPUSLICE_SESSION unset", []string{"-u", "GPUSLICE_SESSION"}, false},
		{"GPUSLICE_SESSION=otherjob", []string{"GPUSLICE_SESSION=otherjob"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.other {
				// Another session of the same user with a larger quota,
				// which the task names.
				if _, err := n.client().CreateSession(ctxFor(t, 30*time.Second),
					client.SessionRequest{ID: "otherjob", UID: u.uid, QuotaBytes: 8 * GiB}); err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{"-v", "-w", n.Name, "--gpu-mem=4G", "env"}, tc.env...)
			args = append(args, c.bin("target_app"), "--api", "driver", "--step", "1G", "--count", "5")
			r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", args...))
			if r.code != 0 {
				t.Fatalf("srun: %s", r)
			}
			app := parseApp(t, r.stdout)
			if app.allowed != 4 || app.denied != 1 {
				t.Errorf("allowed %d denied %d, want 4 and 1 (1 GiB steps under the job's 4 GiB)\n%s", app.allowed, app.denied, r.stdout)
			}
			if tc.other {
				rep, err := n.client().DeleteSession(ctxFor(t, 30*time.Second), "otherjob")
				if err != nil || rep.GPUs[0].PeakBytes != 0 {
					t.Errorf("session otherjob: %+v, %v; want never charged", rep, err)
				}
			}
			c.assertReleased(t, jobID(t, r))
		})
	}
}

// A job's task without the interceptor (env -u LD_PRELOAD, or env -i) that
// takes more than the job's quota is killed by gpusliced's audit (on a node
// whose driver has no memory limits: where it has, the driver refuses the
// allocation, TestDriverMemoryLimit), which
// reads the driver's per-process figures and maps the pid to the job from
// its process tree; the job's report says so. With env -i the task keeps
// only the fake GPU's own plumbing (FAKECUDA_STATE, LD_LIBRARY_PATH), which a
// real driver does not need: everything gpuslice set is gone.
func TestUnpreloadedTaskAuditedUnderSlurm(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	app := c.bin("target_app") + " --api driver --step 1G --count 3 --hold 60"
	for _, tc := range []struct{ name, cmd string }{
		{"env -u LD_PRELOAD", "exec env -u LD_PRELOAD " + app},
		{"env -i", `exec env -i FAKECUDA_STATE="$FAKECUDA_STATE" LD_LIBRARY_PATH="$LD_LIBRARY_PATH" FAKECUDA_CTX_BYTES=0 ` + app},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "-w", c.auditNode(t).Name, "--gpu-mem=2G", "sh", "-c", tc.cmd))
			if r.code == 0 {
				t.Fatalf("a task holding 3 GiB under a 2 GiB quota ran to the end: %s", r)
			}
			id := jobID(t, r)
			c.assertReleased(t, id)
			h := c.history(t, id)
			if h.AuditKilled < 1 || len(h.Audit) == 0 || !strings.Contains(h.Audit[0], "killed pid") {
				t.Errorf("report of job %s does not say the audit killed the task: %+v", id, h)
			}
		})
	}
}
