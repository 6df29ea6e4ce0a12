package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `gpuslice run` on a Slurm node, as root, beside Slurm's jobs: its
// command runs in gpuslice-run-<id> at the top of the node's cgroup v2
// hierarchy, held to its quota through the interceptor, and a process of
// it that drops the interceptor is still attributed to the run's session
// by its cgroup and stopped by the audit over the quota. On 26.05 the
// node's gpusliced also reads Slurm's SLUID job directories; the run's
// cgroup is told from them.
func TestGpusliceRunOnNode(t *testing.T) {
	c := needCluster(t)
	if !tracking.cgroup {
		t.Skip("the cluster runs without cgroups (GPUSLICE_SLURM_TRACKING=linuxproc)")
	}
	n := c.nodes[0]
	gsRun := func(id, quota, script string) result {
		cmd := n.onNode(nil, c.bin("gpuslice"), "--admin-socket", c.admSock, "--ipc-socket", c.ipcSock,
			"run", "-q", "--gpu-mem", quota, "--id", id, "--", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "GPUSLICE_PRELOAD="+c.bin("interceptor"))
		return run(ctxFor(t, 2*time.Minute), cmd)
	}

	t.Run("held to its quota", func(t *testing.T) {
		r := gsRun("noderun1", "1G", `grep '^0::' /proc/self/cgroup; `+c.bin("target_app")+" --step 512M --count 3")
		if r.code != 0 {
			t.Fatalf("gpuslice run: %s", r)
		}
		if !strings.Contains(r.stdout, "0::/gpuslice-run-noderun1\n") {
			t.Errorf("the command's cgroup is not gpuslice-run-noderun1:\n%s", r.stdout)
		}
		app := parseApp(t, r.stdout)
		if app.total != 1*GiB || app.allowed != 2 || app.denied != 1 {
			t.Errorf("total %d allowed %d denied %d; want a 1 GiB quota, 2 allocations allowed and the third refused", app.total, app.allowed, app.denied)
		}
	})

	t.Run("a process without the interceptor stopped by the audit", func(t *testing.T) {
		logPath := c.path("log", "gpusliced-"+n.Name+".out")
		r := gsRun("noderun2", "1G", "exec env -u LD_PRELOAD "+c.bin("target_app")+" --step 2G --count 1 --hold 60")
		if r.code == 0 {
			t.Fatalf("the process over its run's quota without the interceptor ran to its end: %s", r)
		}
		audit := grepFile(logPath, "noderun2")
		if !strings.Contains(audit, "audit: session over its quota") {
			t.Errorf("gpusliced's log on %s does not show the audit stopping the run's process:\n%s\n%s", n.Name, audit, r)
		}
		if err := n.waitIdleGPUs(30 * time.Second); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(n.cg, "gpuslice-run-noderun2")); err == nil {
			t.Errorf("the run's cgroup is left on %s", n.Name)
		}
		t.Logf("gpuslice run: exit %d; gpusliced: %s", r.code, firstLine(audit, "audit"))
	})
}

// firstLine is the first line of s holding sub ("" when none).
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return fmt.Sprintf("(no line with %q)", sub)
}
