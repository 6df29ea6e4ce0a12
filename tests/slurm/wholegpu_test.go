package slurm

// Whole GPUs beside shares (docs/slurm.md, "Whole GPUs and shards on one
// node"). job_submit.lua lets a job of whole GPUs (--gpus=N, --gres=gpu:N)
// share its node only where Slurm never gives a GPU whose shards a job
// uses to a gres/gpu job (23.11.5 on); before, it gives such a job a node
// of its own. TestGresGPUApartFromShards measures which releases keep the
// two apart, on every release of the suite, against the release table
// (slurmRelease.gresGPUApart), and checks the rule job_submit.lua applies
// there.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holdScript is a batch job that runs until it is cancelled.
const holdScript = "#!/bin/sh\nsleep 600\n"

// whole_gpus in the shipped job_submit.lua: the site's setting, which
// withWholeGPUs replaces.
const wholeGPUsSetting = `whole_gpus = os.getenv("GPUSLICE_WHOLE_GPUS") or "auto",`

// withWholeGPUs installs job_submit.lua with the site's whole_gpus set to
// v for the rest of t, and the shipped script again after.
func (c *cluster) withWholeGPUs(t *testing.T, v string) {
	t.Helper()
	path := c.path("job_submit.lua")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(orig), wholeGPUsSetting) {
		t.Fatalf("the shipped job_submit.lua does not set %s", wholeGPUsSetting)
	}
	mod := strings.Replace(string(orig), wholeGPUsSetting, fmt.Sprintf("whole_gpus = %q,", v), 1)
	if err := c.replaceJobSubmit(mod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.replaceJobSubmit(string(orig)); err != nil {
			t.Errorf("restore job_submit.lua: %v", err)
		}
	})
}

// replaceJobSubmit writes job_submit.lua. slurmctld loads the script again
// at the next submission when its modification time (in seconds) is later
// than the one it loaded: each version gets one at least two seconds
// later than the last.
func (c *cluster) replaceJobSubmit(text string) error {
	path := c.path("job_submit.lua")
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := writeFile(path, text, 0o644); err != nil {
		return err
	}
	mt := st.ModTime().Add(2 * time.Second)
	if now := time.Now(); mt.Before(now) {
		mt = now
	}
	return os.Chtimes(path, mt, mt)
}

// logSize is how long one of the cluster's logs is now.
func (c *cluster) logSize(name string) int64 {
	st, err := os.Stat(c.path("log", name))
	if err != nil {
		return 0
	}
	return st.Size()
}

// waitLogSince waits until what log name gained after offset holds want.
func (c *cluster) waitLogSince(t *testing.T, name string, offset int64, want string) {
	t.Helper()
	var got string
	if err := waitFor(20*time.Second, func() error {
		b, err := os.ReadFile(c.path("log", name))
		if err != nil {
			return err
		}
		if int64(len(b)) < offset {
			offset = 0
		}
		got = string(b[offset:])
		if !strings.Contains(got, want) {
			return fmt.Errorf("%s lacks %q", name, want)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; what it logged since:\n%s", err, tail(got, 20))
	}
}

// waitJobFields waits until scontrol's fields of job id satisfy ok.
func (c *cluster) waitJobFields(t *testing.T, id string, d time.Duration, ok func(map[string]string) error) map[string]string {
	t.Helper()
	var j map[string]string
	if err := waitFor(d, func() error {
		var err error
		if j, err = c.job(id); err != nil {
			return err
		}
		return ok(j)
	}); err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// waitRunning waits until job id runs.
func (c *cluster) waitRunning(t *testing.T, id string) {
	t.Helper()
	c.waitJobFields(t, id, 2*time.Minute, func(j map[string]string) error {
		if j["JobState"] != "RUNNING" {
			return fmt.Errorf("%s (%s), want RUNNING", j["JobState"], j["Reason"])
		}
		return nil
	})
}

// waitDecided waits until slurmctld has started job id or has considered
// it and left it pending with a reason, and returns its fields.
func (c *cluster) waitDecided(t *testing.T, id string) map[string]string {
	t.Helper()
	return c.waitJobFields(t, id, 2*time.Minute, func(j map[string]string) error {
		switch {
		case j["JobState"] == "RUNNING":
			return nil
		case j["JobState"] == "PENDING" && j["Reason"] != "" && j["Reason"] != "None":
			return nil
		}
		return fmt.Errorf("%s (%s), want RUNNING or PENDING for a reason", j["JobState"], j["Reason"])
	})
}

// cancel ends jobs and waits until they have.
func (c *cluster) cancel(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if out, err := c.cmd(nil, "scancel", id).CombinedOutput(); err != nil {
			t.Fatalf("scancel %s: %v: %s", id, err, out)
		}
	}
	for _, id := range ids {
		c.waitJobEnd(t, id, 2*time.Minute)
	}
}

// jobGPUs are the GPUs (their indexes in node n's gres list, as in
// SLURM_JOB_GPUS) Slurm gave job id there: the Prolog's environment.
func (c *cluster) jobGPUs(t *testing.T, id string, n *node) []string {
	t.Helper()
	base := c.path("log", "prolog-"+id+"-"+n.Name)
	var gpus string
	if err := waitFor(time.Minute, func() error {
		// The wrapper writes the log after the Prolog: the environment is
		// whole by then.
		if b, err := os.ReadFile(base + ".log"); err != nil || !strings.Contains(string(b), "ran_ns=") {
			return fmt.Errorf("the Prolog of job %s on %s has not run", id, n.Name)
		}
		b, err := os.ReadFile(base + ".env")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "SLURM_JOB_GPUS="); ok {
				gpus = v
				return nil
			}
		}
		return fmt.Errorf("the Prolog of job %s on %s had no SLURM_JOB_GPUS", id, n.Name)
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Split(gpus, ",")
}

// releaseName is how job_submit.lua names this run's Slurm in slurmctld's
// log (gpuslice.gres_gpu_apart): by the slurm table's constants, and
// between 23.02 and 23.11 by the release slurmctld's executable holds.
func releaseName(t *testing.T, c *cluster) string {
	t.Helper()
	switch {
	case slurm.name < "23.02":
		return "Slurm 22.05 or older"
	case slurm.name >= "24.05":
		return "Slurm 24.05 or later"
	}
	out, err := c.cmd(nil, "slurmctld", "-V").CombinedOutput()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		t.Fatalf("slurmctld -V: %q (%v)", out, err)
	}
	return "Slurm " + f[1]
}

// Whether this Slurm gives a GPU whose shards a job uses to a gres/gpu
// job, measured on tn1 (two 16 GiB GPUs), and what job_submit.lua makes of
// it here.
//
// Slurm alone (job_submit.lua's whole_gpus = share): two shard jobs of
// 9 GiB, one on each GPU (no GPU holds both), then --gres=gpu:1 on the
// node. Where Slurm keeps the two apart the job waits, and when one shard
// job ends it runs on that job's GPU; otherwise it runs at once on a GPU
// whose shards are in use (Slurm 22.05: GPU 0 beside the shard job there).
// The release table must say what was measured.
//
// The rule as shipped: a shard job, then --gres=gpu:1. Where Slurm keeps
// them apart the job runs at once beside it on the other GPU; else it gets
// a node of its own and waits for the shard job, then holds both GPUs.
// slurmctld's log names the release job_submit.lua found (on 23.11, from
// slurmctld's executable).
func TestGresGPUApartFromShards(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	n := c.nodeByName("tn1")
	shard := []string{"-w", n.Name, "--gpu-mem=9G"}

	t.Run("Slurm alone", func(t *testing.T) {
		c.withWholeGPUs(t, "share")
		s1 := c.sbatch(t, u, "apart-s1", holdScript, shard...)
		s2 := c.sbatch(t, u, "apart-s2", holdScript, shard...)
		c.waitRunning(t, s1)
		c.waitRunning(t, s2)
		g1, g2 := c.jobGPUs(t, s1, n), c.jobGPUs(t, s2, n)
		if len(g1) != 1 || len(g2) != 1 || g1[0] == g2[0] {
			t.Fatalf("shard jobs %s and %s of 9 GiB on GPUs %v and %v; want one GPU each, not the same", s1, s2, g1, g2)
		}
		off := c.logSize("slurmctld.log")
		g := c.sbatch(t, u, "apart-gpu", holdScript, "-w", n.Name, "--gres=gpu:1")
		c.waitLogSince(t, "slurmctld.log", off, "whole GPUs: beside other jobs (whole_gpus = share)")
		j := c.waitDecided(t, g)
		apart := j["JobState"] == "PENDING"
		if apart {
			// It waits for a GPU free of shards: one shard job ends, and
			// the GPU job gets its GPU.
			c.cancel(t, s1)
			c.waitRunning(t, g)
			got := c.jobGPUs(t, g, n)
			t.Logf("Slurm %s: --gres=gpu:1 job %s pending (%s) while shard jobs %s and %s held GPUs %s and %s; "+
				"on GPU %v once %s ended", slurm.name, g, j["Reason"], s1, s2, g1[0], g2[0], got, s1)
			if len(got) != 1 || got[0] != g1[0] {
				t.Errorf("job %s was given GPUs %v once job %s left GPU %s; want that GPU alone", g, got, s1, g1[0])
			}
		} else {
			got := c.jobGPUs(t, g, n)
			t.Logf("Slurm %s: --gres=gpu:1 job %s given GPU %v while shard jobs %s (GPU %s) and %s (GPU %s) ran",
				slurm.name, g, got, s1, g1[0], s2, g2[0])
			if len(got) != 1 || got[0] != g1[0] && got[0] != g2[0] {
				t.Errorf("job %s was given GPUs %v; the node has only GPUs %s and %s, both with shards in use", g, got, g1[0], g2[0])
			}
		}
		if apart != slurm.gresGPUApart {
			t.Errorf("Slurm %s keeps a GPU held as gres/gpu away from shards: %v measured, %v in the release table (slurmRelease.gresGPUApart)",
				slurm.name, apart, slurm.gresGPUApart)
		}
		c.cancel(t, s1, s2, g)
	})

	t.Run("job_submit.lua's rule", func(t *testing.T) {
		s := c.sbatch(t, u, "rule-s", holdScript, shard...)
		c.waitRunning(t, s)
		gs := c.jobGPUs(t, s, n)
		off := c.logSize("slurmctld.log")
		g := c.sbatch(t, u, "rule-gpu", holdScript, "-w", n.Name, "--gres=gpu:1")
		rel := releaseName(t, c)
		if slurm.gresGPUApart {
			c.waitLogSince(t, "slurmctld.log", off, "whole GPUs: beside other jobs ("+rel+" keeps a GPU held as gres/gpu away from shards)")
			c.waitRunning(t, g)
			got := c.jobGPUs(t, g, n)
			j, err := c.job(s)
			if err != nil || j["JobState"] != "RUNNING" {
				t.Errorf("shard job %s: %v (%v), want it running beside job %s", s, j["JobState"], err, g)
			}
			if len(got) != 1 || got[0] == gs[0] {
				t.Errorf("job %s was given GPUs %v beside shard job %s on GPU %s; want the other GPU alone", g, got, s, gs[0])
			}
			t.Logf("Slurm %s: --gres=gpu:1 job %s ran at once on GPU %v beside shard job %s on GPU %s", slurm.name, g, got, s, gs[0])
			c.cancel(t, s, g)
			return
		}
		c.waitLogSince(t, "slurmctld.log", off, "whole GPUs: a node of its own ("+rel+": taken to give a GPU as gres/gpu while its shards are in use, as before 23.11.5)")
		j := c.waitDecided(t, g)
		if j["JobState"] != "PENDING" || j["OverSubscribe"] != "NO" {
			t.Errorf("job %s beside shard job %s: %s, OverSubscribe=%s; want it pending for a node of its own", g, s, j["JobState"], j["OverSubscribe"])
		}
		c.cancel(t, s)
		c.waitRunning(t, g)
		gpus, err := n.gpus()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.jobGPUs(t, g, n); len(got) != len(gpus) {
			t.Errorf("job %s on a node of its own was given GPUs %v, want all %d", g, got, len(gpus))
		}
		t.Logf("Slurm %s: --gres=gpu:1 job %s waited (%s) for shard job %s, then ran alone", slurm.name, g, j["Reason"], s)
		c.cancel(t, g)
	})
}

// atoi is s as a number, -1 when it is none.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
