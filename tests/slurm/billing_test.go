package slurm

// Billing and fair-share by GPU memory (docs/monitoring.md): slurm.conf
// records gres/shard (a job's GPU memory, MiB) and gres/gpu, priority is
// multifactor, and each partition of one GPU size bills what
// `gpuslice slurm-config --print billing` prints on its nodes: GiB of GPU
// memory, a share by its quota, a whole GPU by its size. Real slurmctld,
// slurmdbd and MariaDB; the figures are sacct's and sshare's.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// billingAccount is the Slurm account of the test users in this suite.
const billingAccount = "gsbill"

// prepareBilling adds the accounting lines of docs/monitoring.md and
// bills each partition of one node by that node's GPUs, plus a partition
// "small" of tn1 (16 GiB GPUs) beside "big" (tn2, 40 GiB). No decay of
// past usage (PriorityDecayHalfLife=0, which Slurm takes only with a
// PriorityUsageResetPeriod), so that sshare's usage is exactly billing
// times seconds.
func (c *cluster) prepareBilling() error {
	c.opts.Accounting = append(c.opts.Accounting,
		"AccountingStorageTRES=gres/gpu,gres/shard",
		"PriorityType=priority/multifactor",
		"PriorityWeightFairshare=10000",
		"PriorityDecayHalfLife=0",
		"PriorityUsageResetPeriod=YEARLY",
		"PriorityCalcPeriod=1")
	billing := map[string]string{}
	for _, n := range c.nodes {
		b, err := n.slurmConfig("billing")
		if err != nil {
			return err
		}
		billing[n.Name] = b
	}
	parts := append([]string(nil), c.opts.Partitions...)
	if b := billing["tn1"]; b != "" {
		parts = append(parts, "PartitionName=small Nodes=tn1 MaxTime=10 State=UP")
	}
	for i, p := range parts {
		for _, f := range strings.Fields(p) {
			if nodes, ok := strings.CutPrefix(f, "Nodes="); ok && billing[nodes] != "" {
				parts[i] = p + " " + billing[nodes]
			}
		}
	}
	c.opts.Partitions = parts
	return nil
}

// share is a user's line of sshare.
type share struct {
	raw       uint64  // RawUsage: billing x seconds
	fairShare float64 // FairShare: the fair-share factor
}

// shares reads sshare for the billing account's users.
func (c *cluster) shares(t *testing.T) map[string]share {
	t.Helper()
	out, err := c.cmd(nil, "sshare", "-n", "-P", "-a", "-A", billingAccount, "-o", "User,RawUsage,FairShare").CombinedOutput()
	if err != nil {
		t.Fatalf("sshare: %v: %s", err, out)
	}
	m := map[string]share{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "|")
		if len(f) < 3 || strings.TrimSpace(f[0]) == "" {
			continue
		}
		raw, _ := strconv.ParseUint(strings.TrimSpace(f[1]), 10, 64)
		fs, _ := strconv.ParseFloat(strings.TrimSpace(f[2]), 64)
		m[strings.TrimSpace(f[0])] = share{raw: raw, fairShare: fs}
	}
	return m
}

// billedJob runs a batch job of u in partition part with args and
// returns its billing and elapsed seconds as sacct records them.
type billed struct {
	id      string
	billing uint64
	elapsed uint64
	tres    string
}

func (c *cluster) jobBilling(t *testing.T, id string) billed {
	t.Helper()
	b := billed{id: id}
	line := c.sacctField(t, id, "AllocTRES,ElapsedRaw,State", func(v string) error {
		if !strings.Contains(v, "billing=") || !strings.HasSuffix(v, "|COMPLETED") {
			return fmt.Errorf("job %s: %q: not completed with a billing yet", id, v)
		}
		return nil
	})
	f := strings.Split(line, "|")
	b.tres = f[0]
	for _, kv := range strings.Split(f[0], ",") {
		if v, ok := strings.CutPrefix(kv, "billing="); ok {
			b.billing, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	b.elapsed, _ = strconv.ParseUint(f[1], 10, 64)
	return b
}

// Two users run jobs of the same length side by side on 40 GiB GPUs, one
// asking 4 GiB, the other 16 GiB: each bills its GiB (4 and 16, a tenth
// and two fifths of a whole GPU), sshare's usage is billing times the
// seconds counted (so four times as much for the second), and the second
// has the lower fair-share factor. Whole GPUs bill their size.
//
// slurmctld adds a job's usage at each pass of its priority calculation
// (PriorityCalcPeriod, a minute here) while the job runs, from its start
// or the last pass up to this one; what a job runs after the last pass
// before its end is not counted (this cluster sets no
// AccountingStorageEnforce=limits, without which slurmctld adds no usage
// at a job's end: TestUsageAtJobEnd). So the jobs run past a pass: 75 s.
func TestFairShareByGPUMemory(t *testing.T) {
	c := needAccounting(t)
	u1, u2 := c.users["gsltest1"], c.users["gsltest2"]
	// An account holding both users, with equal shares.
	for _, args := range [][]string{
		{"-i", "add", "account", billingAccount},
		{"-i", "add", "user", u1.name, u2.name, "account=" + billingAccount},
	} {
		out, err := c.cmd(nil, "sacctmgr", args...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "already exist") && !strings.Contains(string(out), "Nothing new added") {
			t.Fatalf("sacctmgr %v: %v: %s", args, err, out)
		}
	}
	if err := waitFor(60*time.Second, func() error {
		s := c.shares(t)
		if _, ok := s[u1.name]; !ok {
			return fmt.Errorf("sshare has no %s under %s: %v", u1.name, billingAccount, s)
		}
		if _, ok := s[u2.name]; !ok {
			return fmt.Errorf("sshare has no %s under %s: %v", u2.name, billingAccount, s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []*testUser{u1, u2} {
		out, err := c.cmd(nil, "sacctmgr", "-i", "modify", "user", "where", "name="+u.name, "account="+billingAccount,
			"set", "RawUsage=0").CombinedOutput()
		if err != nil {
			t.Fatalf("sacctmgr reset the usage of %s: %v: %s", u.name, err, out)
		}
	}
	if err := waitFor(30*time.Second, func() error {
		if s := c.shares(t); s[u1.name].raw != 0 || s[u2.name].raw != 0 {
			return fmt.Errorf("usage not reset: %+v", s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	script := "#!/bin/sh\nsleep 75\n"
	id1 := c.sbatch(t, u1, "bill4", script, "-p", "big", "--gpu-mem=4G", "-A", billingAccount)
	id2 := c.sbatch(t, u2, "bill16", script, "-p", "big", "--gpu-mem=16G", "-A", billingAccount)
	c.waitJobEnd(t, id1, 3*time.Minute)
	c.waitJobEnd(t, id2, 3*time.Minute)
	j1, j2 := c.jobBilling(t, id1), c.jobBilling(t, id2)
	t.Logf("4 GiB job %s: %s, %d s; 16 GiB job %s: %s, %d s", id1, j1.tres, j1.elapsed, id2, j2.tres, j2.elapsed)
	if j1.billing != 4 || !strings.Contains(j1.tres, "gres/shard=4096") || j2.billing != 16 || !strings.Contains(j2.tres, "gres/shard=16384") {
		t.Fatalf("billing: job %s %q, job %s %q; want billing=4 with gres/shard=4096, billing=16 with gres/shard=16384",
			id1, j1.tres, id2, j2.tres)
	}
	if j1.elapsed < 60 || j2.elapsed < 60 {
		t.Fatalf("elapsed %d s and %d s, want both past a priority pass", j1.elapsed, j2.elapsed)
	}
	var s map[string]share
	var t1, t2 uint64 // the seconds counted for each job
	if err := waitFor(30*time.Second, func() error {
		s = c.shares(t)
		r1, r2 := s[u1.name].raw, s[u2.name].raw
		t1, t2 = r1/j1.billing, r2/j2.billing
		switch {
		case r1 == 0 || r2 == 0:
			return fmt.Errorf("no usage yet: %s %d, %s %d", u1.name, r1, u2.name, r2)
		case r1%j1.billing != 0 || r2%j2.billing != 0 || t1 > j1.elapsed || t2 > j2.elapsed || t1+1 < t2 || t2+1 < t1:
			return fmt.Errorf("sshare RawUsage %s %d, %s %d: not billing (%d, %d) times the same seconds, at most %d and %d",
				u1.name, r1, u2.name, r2, j1.billing, j2.billing, j1.elapsed, j2.elapsed)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("sshare: %s %+v; %s %+v (%d and %d s counted)", u1.name, s[u1.name], u2.name, s[u2.name], t1, t2)
	if !(s[u2.name].fairShare < s[u1.name].fairShare) {
		t.Errorf("fair-share factor of %s (16 GiB) %v, of %s (4 GiB) %v: want the larger ask lower",
			u2.name, s[u2.name].fairShare, u1.name, s[u1.name].fairShare)
	}

	// Whole GPUs bill their size, each GPU the job holds. Where Slurm keeps
	// a GPU held as gres/gpu away from shards, job_submit.lua lets the job
	// share its node and it holds the GPU it asked: --gpus=1 bills 40 on
	// tn2, 16 on tn1. Elsewhere (22.05) it gives the job a node of its
	// own, and Slurm allocates it every GPU of the node (gres/gpu=2): 2 x
	// 40 GiB on tn2, 2 x 16 on tn1. A 4 GiB share of tn1's GPU bills 4, a
	// quarter of one.
	held := uint64(1)
	if !slurm.gresGPUApart {
		held = 2
	}
	whole := fmt.Sprintf("gres/gpu=%d", held)
	for _, tc := range []struct {
		part string
		args []string
		tres string
		want uint64
	}{
		{"big", []string{"--gpus=1"}, whole, 40 * held},
		{"small", []string{"--gpus=1"}, whole, 16 * held},
		{"small", []string{"--gpu-mem=4G"}, "gres/shard=4096", 4},
	} {
		id := c.sbatch(t, u1, "billw", "#!/bin/sh\ntrue\n", append([]string{"-p", tc.part, "-A", billingAccount}, tc.args...)...)
		c.waitJobEnd(t, id, 2*time.Minute)
		j := c.jobBilling(t, id)
		if j.billing != tc.want || !strings.Contains(j.tres, tc.tres) || tc.args[0] == "--gpus=1" && strings.Contains(j.tres, "gres/shard") {
			t.Errorf("job %s in %s with %v: AllocTRES %q, want billing=%d and %s", id, tc.part, tc.args, j.tres, tc.want, tc.tres)
		}
	}
}
