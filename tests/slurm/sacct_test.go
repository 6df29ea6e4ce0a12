package slurm

// What a --gpu-mem job asked and used, in Slurm's own accounting
// (docs/monitoring.md): the ask in AllocTRES (gres/shard, one per MiB of
// one GPU on each node), gpusliced's figures per node and GPU in
// AdminComment, and a node's refusal there too. Real slurmdbd and MariaDB.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// needAccounting returns the cluster, or skips where it has no slurmdbd.
func needAccounting(t *testing.T) *cluster {
	t.Helper()
	c := needCluster(t)
	if c.acct == nil {
		t.Skip("Slurm accounting is off (GPUSLICE_SLURM_ACCOUNTING=0)")
	}
	return c
}

// sacctField waits until sacct's field of job id (the job's line, -X)
// satisfies ok, and returns it.
func (c *cluster) sacctField(t *testing.T, id, field string, ok func(string) error) string {
	t.Helper()
	var got string
	err := waitFor(60*time.Second, func() error {
		out, err := c.sacct(id, field)
		if err != nil {
			return fmt.Errorf("sacct: %v: %s", err, out)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		got = strings.TrimSpace(lines[len(lines)-1])
		return ok(got)
	})
	if err != nil {
		t.Fatalf("job %s, sacct -o %s: %v\nslurmdbd log:\n%s", id, field, err,
			tail(readFile(t, c.path("log", "slurmdbd.log")), 20))
	}
	return got
}

// containsAll is an ok for sacctField: every part is in the value.
func containsAll(parts ...string) func(string) error {
	return func(v string) error {
		for _, p := range parts {
			if !strings.Contains(v, p) {
				return fmt.Errorf("%q lacks %q", v, p)
			}
		}
		return nil
	}
}

// gpuEntry is one GPU's part of the AdminComment: node, GPU, quota, peak
// and denials.
func gpuEntry(node string, g client.ReportGPU) string {
	return fmt.Sprintf("%s/%s=quota_mib:%d,peak_mib:%d,denied:%d", node, strings.ToLower(g.UUID),
		g.LimitBytes>>20, (g.PeakBytes+(1<<20)-1)>>20, g.Denied)
}

// A job on two nodes that used different amounts on each: sacct shows
// its ask (gres/shard: 1 GiB of one GPU on each of two nodes) and, in
// AdminComment, each node's GPU with that node's peak; one node's Epilog
// does not overwrite the other's.
func TestSacctPerNode(t *testing.T) {
	c := needAccounting(t)
	u := c.users["gsltest1"]
	// tn1 holds 2 x 300 MiB, tn2 3 x 300 MiB (a fourth is denied there).
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=1G
#SBATCH --nodes=2
#SBATCH --nodelist=tn1,tn2
#SBATCH --output=%[1]s/pernode-%%j.out
srun --ntasks-per-node=1 sh -c 'if [ "$SLURMD_NODENAME" = tn1 ]; then n=2; else n=4; fi; exec %[2]s --step 300M --count $n'
`, u.dir, c.bin("target_app"))
	id := c.sbatch(t, u, "pernode", script)
	if j := c.waitJobEnd(t, id, 3*time.Minute); j["JobState"] != "COMPLETED" {
		t.Fatalf("job %s: %v\n%s", id, j, readFile(t, filepath.Join(u.dir, "pernode-"+id+".out")))
	}
	c.assertReleased(t, id)
	want := map[string]uint64{"tn1": 600, "tn2": 900}
	var entries []string
	for _, n := range c.jobNodes(t, id) {
		rep := n.history(t, id)
		if len(rep.GPUs) != 1 || rep.GPUs[0].PeakBytes != want[n.Name]<<20 || rep.GPUs[0].LimitBytes != 1<<30 {
			t.Fatalf("gpusliced's report of job %s on %s: %+v, want one GPU, quota 1 GiB, peak %d MiB", id, n.Name, rep, want[n.Name])
		}
		entries = append(entries, gpuEntry(n.Name, rep.GPUs[0]))
	}
	if len(entries) != 2 {
		t.Fatalf("job %s ran on %d nodes, want 2", id, len(entries))
	}
	// The ask: 1024 shards (MiB) on each node.
	c.sacctField(t, id, "AllocTRES", containsAll("gres/shard=2048"))
	got := c.sacctField(t, id, "AdminComment", containsAll(entries...))
	if !strings.HasPrefix(got, "gpuslice:") || strings.Count(got, ";") != 1 {
		t.Errorf("AdminComment of job %s: %q, want gpuslice: and the two entries %q", id, got, entries)
	}
}

// A node whose gpusliced refused the job's quota says so in AdminComment
// (node, the quota asked); the other node of the job records its GPU.
func TestSacctShowsRefusal(t *testing.T) {
	c := needAccounting(t)
	u := c.users["gsltest2"]
	n := c.nodeByName("tn1")
	n.commitOutOfBand(t, "acct-oob-", 15*GiB) // on both of tn1's GPUs: 1 GiB left
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=4G\n#SBATCH --nodes=2\n#SBATCH --nodelist=tn1,tn2\n#SBATCH --output=%s/acctref-%%j.out\nsrun true\n", u.dir)
	id := c.sbatch(t, u, "acctref", script)
	if j := c.waitJobEnd(t, id, 2*time.Minute); j["JobState"] != "FAILED" {
		t.Fatalf("refused job %s: %s, want FAILED", id, j["JobState"])
	}
	tn2 := c.nodeByName("tn2").history(t, id)
	c.sacctField(t, id, "AdminComment", containsAll("gpuslice:", "tn1/refused=quota_mib:4096", gpuEntry("tn2", tn2.GPUs[0])))
	if bad, err := c.drained(); err != nil || len(bad) > 0 {
		t.Errorf("after refused job %s: drained nodes %v (%v)", id, bad, err)
	}
}
