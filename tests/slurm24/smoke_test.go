package slurm24

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

const MiB = uint64(1) << 20

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The daemons are Debian 13's Slurm 24.11: what this suite is for.
func TestSlurmRelease(t *testing.T) {
	c := needCluster(t)
	deb, err := os.ReadFile("/etc/debian_version")
	if err != nil || !strings.HasPrefix(string(deb), "13") {
		t.Errorf("/etc/debian_version %q (%v), want Debian 13", deb, err)
	}
	for _, prog := range []string{"slurmctld", "slurmd", "srun"} {
		r := run(ctxFor(t, 30*time.Second), c.cmd(nil, prog, "-V"))
		// Debian's builds say "slurm-wlm 24.11.5".
		if r.code != 0 || !regexp.MustCompile(`^slurm(-wlm)? 24\.11\.`).MatchString(r.stdout) {
			t.Errorf("%s -V: %s, want slurm 24.11.x", prog, r)
		}
	}
}

// events parses target_app's key=value lines.
func events(out string) []map[string]string {
	var evs []map[string]string
	for _, line := range strings.Split(out, "\n") {
		e := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				e[k] = v
			}
		}
		if e["event"] != "" {
			evs = append(evs, e)
		}
	}
	return evs
}

var reGranted = regexp.MustCompile(`(?:Granted job allocation|jobid) (\d+)`)

// srun --gpu-mem=64M target_app: the job sees a 64 MiB GPU, gets four
// 16 MiB allocations and is denied the fifth; the Epilog releases the
// session. The GPU is fakecuda's (80 GiB), the quota the interceptor's.
func TestSrunQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=64M",
		c.bin("target_app"), "--step", "16M", "--count", "5"))
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	m := reGranted.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no job id in srun -v output: %s", r)
	}
	id := m[1]
	total, allowed, denied := appCounts(r.stdout)
	if total != strconv.FormatUint(64*MiB, 10) {
		t.Errorf("total memory seen by the job %q, want %d (64 MiB)\n%s", total, 64*MiB, r.stdout)
	}
	if allowed != 4 || denied != 1 {
		t.Errorf("allowed %d denied %d, want 4 and 1 (16 MiB steps under 64 MiB)\n%s", allowed, denied, r.stdout)
	}
	// The Epilog (24.11's slurmd) reclaimed the session.
	c.waitReleased(t, id)
	cmd := c.cmd(nil, c.bin("gpuslice"), "report", id)
	cmd.Env = append(cmd.Env, "GPUSLICE_ADMIN_SOCK="+c.admSock)
	rep := run(ctxFor(t, 30*time.Second), cmd)
	if rep.code != 0 || !strings.Contains(rep.stdout, id) {
		t.Errorf("gpuslice report %s: %s", id, rep)
	}
}

// appCounts reads target_app's output: the total memory it saw first, and
// its allowed and denied allocations.
func appCounts(out string) (total string, allowed, denied int) {
	for _, e := range events(out) {
		switch {
		case e["event"] == "meminfo" && e["when"] == "before":
			total = e["total"]
		case e["event"] == "alloc" && e["status"] == "allowed":
			allowed++
		case e["event"] == "alloc" && e["status"] == "denied":
			denied++
		}
	}
	return total, allowed, denied
}

// waitReleased waits until gpusliced no longer holds job id's session and
// the GPU has nothing committed.
func (c *cluster) waitReleased(t *testing.T, id string) {
	t.Helper()
	if err := waitFor(30*time.Second, func() error {
		if _, err := c.session(id); !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("session %s still there (%v)", id, err)
		}
		gpus, err := c.gpus()
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if g.CommittedBytes != 0 || g.Sessions != 0 {
				return fmt.Errorf("GPU %s: committed %d, sessions %d", g.UUID, g.CommittedBytes, g.Sessions)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// sbatch --gpu-mem=64M: the quota reaches 24.11's Prolog through the job
// control environment and the batch step's tasks through the plugin.
func TestSbatchQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	out := u.dir + "/sbatch-%j.out"
	r := run(ctxFor(t, time.Minute), c.cmd(u, "sbatch", "--parsable", "--gpu-mem=64M", "--output="+out,
		"--wrap", c.bin("target_app")+" --step 16M --count 5"))
	if r.code != 0 {
		t.Fatalf("sbatch: %s", r)
	}
	id := strings.TrimSpace(r.stdout)
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch --parsable printed %q", r.stdout)
	}
	var state string
	if err := waitFor(time.Minute, func() error {
		r := run(ctxFor(t, 30*time.Second), c.cmd(nil, "scontrol", "-o", "show", "job", id))
		m := regexp.MustCompile(`JobState=(\S+)`).FindStringSubmatch(r.stdout)
		if m == nil {
			return fmt.Errorf("scontrol show job %s: %s", id, r)
		}
		if state = m[1]; state == "PENDING" || state == "RUNNING" || state == "COMPLETING" || state == "CONFIGURING" {
			return fmt.Errorf("job %s is %s", id, state)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(strings.ReplaceAll(out, "%j", id))
	if err != nil {
		t.Fatalf("job %s (%s): %v", id, state, err)
	}
	if state != "COMPLETED" {
		t.Fatalf("job %s ended %s:\n%s", id, state, b)
	}
	total, allowed, denied := appCounts(string(b))
	if total != strconv.FormatUint(64*MiB, 10) || allowed != 4 || denied != 1 {
		t.Errorf("batch job: total %q allowed %d denied %d, want 64 MiB, 4 and 1\n%s", total, allowed, denied, b)
	}
	c.waitReleased(t, id)
}

// jobCount is the number of jobs slurmctld knows.
func (c *cluster) jobCount(t *testing.T) int {
	t.Helper()
	r := run(ctxFor(t, 30*time.Second), c.cmd(nil, "squeue", "-h", "-t", "all", "-o", "%i"))
	if r.code != 0 {
		t.Fatalf("squeue: %s", r)
	}
	return len(strings.Fields(r.stdout))
}

// A bad --gpu-mem fails at submission, with the reason, and no job is made.
func TestRejectedAtSubmit(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	before := c.jobCount(t)
	for _, v := range []struct{ val, msg string }{
		{"8X", "gpuslice: invalid --gpu-mem '8X': expected a positive size"},
		{"33G", "gpuslice: invalid --gpu-mem '33G': larger than this cluster's maximum of 32GiB"},
	} {
		for _, argv := range [][]string{{"srun", "true"}, {"sbatch", "--wrap", "true"}} {
			t.Run(argv[0]+" "+v.val, func(t *testing.T) {
				args := append([]string{"--gpu-mem=" + v.val}, argv[1:]...)
				r := run(ctxFor(t, time.Minute), c.cmd(u, argv[0], args...))
				if r.code != 1 || !strings.Contains(r.stderr, v.msg) {
					t.Fatalf("exit %d, want 1 with %q: %s", r.code, v.msg, r)
				}
			})
		}
	}
	if after := c.jobCount(t); after != before {
		t.Fatalf("slurmctld knows %d jobs after the rejected submissions, %d before", after, before)
	}
	if r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "--gpu-mem=32G", "true")); r.code != 0 {
		t.Fatalf("srun --gpu-mem=32G (= max): %s", r)
	}
	if after := c.jobCount(t); after != before+1 {
		t.Fatalf("%d jobs after one accepted submission, want %d", after, before+1)
	}
}

// The plugin built for Slurm 22.05 does not load into 24.11: why each
// release gets its own build. srun refuses to run with it (required in
// plugstack.conf).
func TestOtherReleasePluginRefused(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	if err := c.writePlugstack(c.bin("plugin-22.05")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.writePlugstack(c.bin("plugin")); err != nil {
			t.Error(err)
		}
	})
	r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "--gpu-mem=64M", "true"))
	if r.code == 0 {
		t.Fatalf("srun with the 22.05 plugin succeeded: %s", r)
	}
	if !strings.Contains(strings.ToLower(r.stderr), "incompatible") {
		t.Errorf("srun's error does not say the plugin is incompatible: %s", r)
	}
	t.Logf("srun with the 22.05 plugin: exit %d: %s", r.code, strings.TrimSpace(r.stderr))
}
