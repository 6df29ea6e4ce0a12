package slurm

// What a --gpu-mem job asked and used, in Slurm's own accounting
// (docs/monitoring.md): the ask in AllocTRES (gres/shard, one per MiB of
// one GPU on each node), the summary of gpusliced's figures over the
// job's nodes in AdminComment, and a node's refusal there too. Real
// slurmdbd and MariaDB.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// figuresBound is how long a job's figures may take to be whole in
// Slurm's accounting after it ends: gpusliced writes each node's within
// seconds, and a write another node's concurrent one replaced is found at
// the first look (3 s) or, at worst, at the confirming read a settle time
// (65 s) after it, then written again (daemon/acctrecord).
const figuresBound = 3 * time.Minute

// sacctField waits until sacct's field of job id (the job's line, -X)
// satisfies ok, and returns it.
func (c *cluster) sacctField(t *testing.T, id, field string, ok func(string) error) string {
	t.Helper()
	var got string
	err := waitFor(figuresBound, func() error {
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

// A job on two nodes that used different amounts on each: sacct shows
// its ask (gres/shard: 1 GiB of one GPU on each of two nodes) and, in
// AdminComment, both nodes counted, the higher peak and where, the
// allocations denied on either; one node's write does not overwrite the
// other's.
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
	nodes := c.jobNodes(t, id)
	for _, n := range nodes {
		rep := n.history(t, id)
		if len(rep.GPUs) != 1 || rep.GPUs[0].PeakBytes != want[n.Name]<<20 || rep.GPUs[0].LimitBytes != 1<<30 {
			t.Fatalf("gpusliced's report of job %s on %s: %+v, want one GPU, quota 1 GiB, peak %d MiB", id, n.Name, rep, want[n.Name])
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("job %s ran on %d nodes, want 2", id, len(nodes))
	}
	for _, n := range nodes { // what slurmd gave each node's Epilog (the record's own list)
		for _, l := range strings.Split(readFile(t, c.path("log", "epilog-"+id+"-"+n.Name+".env")), "\n") {
			if strings.HasPrefix(l, "SLURM_JOB_NODELIST=") || strings.HasPrefix(l, "SLURM_JOB_NUM_NODES=") {
				t.Logf("the Epilog of job %s on %s: %s", id, n.Name, l)
			}
		}
	}
	// The ask: 1024 shards (MiB) on each node.
	c.sacctField(t, id, "AllocTRES", containsAll("gres/shard=2048"))
	summary := c.wantComment(t, id, 1024)
	if !strings.HasPrefix(summary, "gpuslice:v2;quota_mib=1024;nodes=2;reported=0-1;peak_mib=900;peak_on=tn2/gpu-") ||
		!strings.HasSuffix(summary, ";denied=1") {
		t.Fatalf("the summary of the nodes' reports of job %s: %q", id, summary)
	}
	c.sacctField(t, id, "AdminComment", func(v string) error {
		if v != summary {
			return fmt.Errorf("%q, want %q", v, summary)
		}
		return nil
	})
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
	// tn1 first in the job's node list: index 0 refused, tn2's GPU counted
	summary := c.wantComment(t, id, 4096, "tn1")
	if !strings.HasPrefix(summary, "gpuslice:v2;quota_mib=4096;nodes=2;reported=0-1;refused=0;") {
		t.Fatalf("the summary of job %s: %q", id, summary)
	}
	c.sacctField(t, id, "AdminComment", func(v string) error {
		if v != summary {
			return fmt.Errorf("%q, want %q", v, summary)
		}
		return nil
	})
	if bad, err := c.drained(); err != nil || len(bad) > 0 {
		t.Errorf("after refused job %s: drained nodes %v (%v)", id, bad, err)
	}
}
