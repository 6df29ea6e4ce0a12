package slurm

// Whole GPUs beside shares (docs/slurm.md, "Whole GPUs and shards on one
// node"). job_submit.lua lets a job of whole GPUs (--gpus=N, --gres=gpu:N)
// share its node only where Slurm never gives a GPU whose shards a job
// uses to a gres/gpu job (23.11.5 on); before, it gives such a job a node
// of its own. TestGresGPUApartFromShards measures which releases keep the
// two apart, on every release of the suite, against the release table
// (slurmRelease.gresGPUApart), and checks the rule job_submit.lua applies
// there; TestWholeGPUBesideShares runs whole GPUs and shares on one node of
// four GPUs while the driver's process lists are sampled.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// quadNode is the node of four 16 GiB GPUs, alone in partition quad, of
// the cluster with GPUSLICE_SLURM_QUAD=1 (defaultOptions).
const quadNode = "tn3"

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

// gpuProcs samples node n's GPUs as the driver shows them (NVML's process
// list, nvml_query run there as root) and which job each process is of
// (SLURM_JOB_ID in its environment).
type gpuProcs struct {
	c        *cluster
	n        *node
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	samples  []map[int][]string // per sample: GPU index -> jobs with a process on it
	errs     []string
	jobOfPid map[int]string
}

func (c *cluster) sampleGPUProcs(n *node) *gpuProcs {
	s := &gpuProcs{c: c, n: n, stop: make(chan struct{}), done: make(chan struct{}), jobOfPid: map[int]string{}}
	go func() {
		defer close(s.done)
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *gpuProcs) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := run(ctx, s.n.onNode(nil, filepath.Join(s.c.build, "examples", "nvml_query")))
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.code != 0 {
		s.errs = append(s.errs, r.String())
		return
	}
	on := map[int][]string{}
	for _, e := range events(r.stdout) {
		if e["event"] != "process" {
			continue
		}
		idx, err1 := strconv.Atoi(e["index"])
		pid, err2 := strconv.Atoi(e["pid"])
		if err1 != nil || err2 != nil {
			s.errs = append(s.errs, fmt.Sprintf("nvml_query: %v", e))
			continue
		}
		job, ok := s.jobOfPid[pid]
		if !ok {
			job = pidJob(pid)
			if job == "" {
				continue // gone already, or no job's
			}
			s.jobOfPid[pid] = job
		}
		if !contains(on[idx], job) {
			on[idx] = append(on[idx], job)
		}
	}
	s.samples = append(s.samples, on)
}

// pidJob is the SLURM_JOB_ID in process pid's environment ("" if none).
func pidJob(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, "SLURM_JOB_ID="); ok {
			return v
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// finish stops sampling and returns the samples.
func (s *gpuProcs) finish(t *testing.T) []map[int][]string {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		t.Errorf("%d of %d samples of %s's GPUs failed: %v", len(s.errs), len(s.samples)+len(s.errs), s.n.Name, s.errs[0])
	}
	return s.samples
}

// A job of one whole GPU and jobs of shares on one node of four 16 GiB
// GPUs (tn3, GPUSLICE_SLURM_QUAD=1), with the driver's process lists
// sampled throughout.
//
// Where Slurm keeps a GPU held as gres/gpu away from shards: three shard
// jobs of 10 GiB take three GPUs (no GPU holds two); --gpus=1 runs at once
// on the fourth; a fourth shard job then waits, though the whole GPU's
// job uses 1 GiB of its 16, and runs on the GPU of the first shard job to
// end. The sampler never sees a shard job's process on the whole GPU, nor
// the whole GPU's job on another, and sees them run at the same time.
// sacct bills the job the one GPU it holds: gres/gpu=1, billing=16.
//
// On 22.05 the whole GPU's job has the node to itself: it waits for the
// shard jobs, then holds all four GPUs (gres/gpu=4, billing=64) and the
// fourth shard job waits for it.
func TestWholeGPUBesideShares(t *testing.T) {
	c := needAccounting(t)
	n := c.nodeByName(quadNode)
	if n == nil {
		t.Skipf("the cluster has no node of four GPUs (%s): GPUSLICE_SLURM_QUAD=1 (make test-slurm, test-slurm-24.11 and test-slurm-26.05 run it so)", quadNode)
	}
	alice, bob := c.users["gsltest1"], c.users["gsltest2"]
	// Each job allocates 1 GiB and holds it until told to end (its go
	// file). The signal waits for the hold: a job started once its go file
	// was there signalled target_app before its handler was set (exit 138).
	job := func(u *testUser, name string, args ...string) string {
		script := fmt.Sprintf(`#!/bin/sh
#SBATCH --output=%[1]s/%[2]s-%%j.out
out=%[1]s/%[2]s-$SLURM_JOB_ID.app
%[3]s --step 1G --count 1 --hold 600 >$out &
pid=$!
until [ -e %[1]s/%[2]s.go ] && grep -q event=hold $out; do sleep 0.2; done
kill -USR1 $pid
wait $pid
rc=$?
cat $out
exit $rc
`, u.dir, name, c.bin("target_app"))
		return c.sbatch(t, u, name, script, append([]string{"-p", "quad"}, args...)...)
	}
	end := func(u *testUser, name, id string) {
		t.Helper()
		if err := writeFile(filepath.Join(u.dir, name+".go"), "", 0o644); err != nil {
			t.Fatal(err)
		}
		j := c.waitJobEnd(t, id, 2*time.Minute)
		if j["JobState"] != "COMPLETED" {
			t.Errorf("job %s (%s): %s, want COMPLETED", id, name, j["JobState"])
		}
	}
	gpus := func(id string) string { return strings.Join(c.jobGPUs(t, id, n), ",") }

	procs := c.sampleGPUProcs(n)
	var shards []string
	shardGPU := map[string]string{}
	for i := 1; i <= 3; i++ {
		id := job(bob, fmt.Sprintf("beside-s%d", i), "--gpu-mem=10G")
		shards = append(shards, id)
	}
	for _, id := range shards {
		c.waitRunning(t, id)
		shardGPU[id] = gpus(id)
	}
	w := job(alice, "beside-w", "--gpus=1")
	var wGPU, s4 string
	if slurm.gresGPUApart {
		c.waitRunning(t, w)
		wGPU = gpus(w)
		for _, id := range shards {
			if j, err := c.job(id); err != nil || j["JobState"] != "RUNNING" {
				t.Fatalf("shard job %s: %v (%v), want it running beside job %s", id, j["JobState"], err, w)
			}
			if shardGPU[id] == wGPU {
				t.Fatalf("whole-GPU job %s was given GPU %s, which shard job %s holds", w, wGPU, id)
			}
		}
		s4 = job(bob, "beside-s4", "--gpu-mem=10G")
		if j := c.waitDecided(t, s4); j["JobState"] != "PENDING" {
			t.Fatalf("shard job %s of 10 GiB runs (GPUs %s) while jobs %v hold the other three GPUs and job %s GPU %s",
				s4, gpus(s4), shards, w, wGPU)
		}
		end(bob, "beside-s1", shards[0])
		c.waitRunning(t, s4)
		if got := gpus(s4); got != shardGPU[shards[0]] {
			t.Errorf("shard job %s was given GPU %s once job %s left GPU %s", s4, got, shards[0], shardGPU[shards[0]])
		}
		// Both at once, as the driver sees them, in a few samples before
		// either ends.
		procs.waitSeen(t, w, true)
		end(alice, "beside-w", w)
		for i, id := range append(shards[1:], s4) {
			end(bob, fmt.Sprintf("beside-s%d", i+2), id)
		}
	} else {
		j := c.waitDecided(t, w)
		if j["JobState"] != "PENDING" || j["OverSubscribe"] != "NO" {
			t.Fatalf("whole-GPU job %s beside shard jobs %v: %s, OverSubscribe=%s; want it pending for a node of its own",
				w, shards, j["JobState"], j["OverSubscribe"])
		}
		for i, id := range shards {
			end(bob, fmt.Sprintf("beside-s%d", i+1), id)
		}
		c.waitRunning(t, w)
		if wGPU = gpus(w); wGPU != "0,1,2,3" {
			t.Errorf("whole-GPU job %s on a node of its own was given GPUs %s, want 0,1,2,3", w, wGPU)
		}
		s4 = job(bob, "beside-s4", "--gpu-mem=10G")
		if j := c.waitDecided(t, s4); j["JobState"] != "PENDING" {
			t.Errorf("shard job %s runs beside whole-GPU job %s on its node of its own", s4, w)
		}
		procs.waitSeen(t, w, false)
		end(alice, "beside-w", w)
		c.waitRunning(t, s4)
		end(bob, "beside-s4", s4)
	}
	samples := procs.finish(t)

	// What the driver showed: a GPU with the whole-GPU job's process has
	// no other job's, and the whole-GPU job is on its GPUs only.
	mine := map[int]bool{}
	for _, g := range strings.Split(wGPU, ",") {
		mine[atoi(g)] = true
	}
	seen, together := 0, 0
	var bad []string
	for i, smp := range samples {
		for g, jobs := range smp {
			if !contains(jobs, w) {
				continue
			}
			seen++
			if len(jobs) > 1 || !mine[g] {
				bad = append(bad, fmt.Sprintf("sample %d: GPU %d: jobs %v", i, g, jobs))
			}
			if len(smp) > 1 {
				together++
			}
		}
	}
	t.Logf("%d samples of %s's GPUs: the whole-GPU job %s (GPUs %s) in %d, beside a shard job on another GPU in %d",
		len(samples), n.Name, w, wGPU, seen, together)
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("another job's process on whole-GPU job %s's GPUs, or it on another GPU, at %d samples: %v", w, len(bad), bad[0])
	}
	if seen == 0 {
		t.Errorf("no sample shows whole-GPU job %s's process: the sampler saw nothing to check", w)
	}
	if slurm.gresGPUApart && together == 0 {
		t.Errorf("no sample shows whole-GPU job %s beside a shard job", w)
	}

	// Billing (the partition bills GRES/gpu=16, GRES/shard=1/1024): the
	// GPUs the job holds.
	wantGPUs, wantBilling := 1, 16
	if !slurm.gresGPUApart {
		wantGPUs, wantBilling = 4, 64
	}
	tres := c.sacctField(t, w, "AllocTRES", containsAll(fmt.Sprintf("gres/gpu=%d", wantGPUs), fmt.Sprintf("billing=%d", wantBilling)))
	if strings.Contains(tres, "gres/shard") {
		t.Errorf("whole-GPU job %s: AllocTRES %q has shards", w, tres)
	}
	stres := c.sacctField(t, s4, "AllocTRES", containsAll("gres/shard=10240", "billing=10"))
	t.Logf("AllocTRES: whole-GPU job %s %s; shard job %s %s", w, tres, s4, stres)
}

// waitSeen waits until a few samples show job's process, beside another
// job's on another GPU when beside.
func (s *gpuProcs) waitSeen(t *testing.T, job string, beside bool) {
	t.Helper()
	if err := waitFor(time.Minute, func() error {
		n := 0
		for _, smp := range s.snapshot() {
			for _, jobs := range smp {
				if contains(jobs, job) && (!beside || len(smp) > 1) {
					n++
				}
			}
		}
		if n < 5 {
			return fmt.Errorf("%d samples of %s's GPUs show job %s (beside a shard job: %v), want 5", n, s.n.Name, job, beside)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// snapshot copies the samples so far.
func (s *gpuProcs) snapshot() []map[int][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[int][]string(nil), s.samples...)
}

// atoi is s as a number, -1 when it is none.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
