package slurm

// Slurm schedules GPU memory (job_submit.lua → gres/shard), and no user
// request ever drains a node: the proofs of docs/slurm.md's "Scheduling by
// GPU memory" on the two-node cluster.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// queueJob is one job of the queue test.
type queueJob struct {
	user  *testUser
	name  string
	args  []string // sbatch options
	quota uint64   // --gpu-mem; 0: a whole GPU, no quota
	array int      // tasks, 0: not an array
}

// A queue of mixed jobs, submitted at once by two users, all complete: one
// GPU's quotas never add up to more than it has (sampled), no node is ever
// drained, and each job's processes see and hit their own quota.
func TestQueuePacksByGPUMemory(t *testing.T) {
	c := needCluster(t)
	u1, u2 := c.users["gsltest1"], c.users["gsltest2"]
	var jobs []queueJob
	sizes := []string{"2G", "3G", "5G", "6G", "8G", "10G", "12G", "14G", "20G", "30G"}
	for i := 0; i < 30; i++ {
		u := u1
		if i%2 == 1 {
			u = u2
		}
		sz := sizes[i%len(sizes)]
		jobs = append(jobs, queueJob{user: u, name: fmt.Sprintf("q%02d", i), args: []string{"--gpu-mem=" + sz}, quota: mustSize(t, sz)})
	}
	jobs = append(jobs,
		queueJob{user: u1, name: "qarr1", args: []string{"--gpu-mem=4G", "--array=1-5"}, quota: 4 * GiB, array: 5},
		queueJob{user: u2, name: "qarr2", args: []string{"--gpu-mem=9G", "--array=1-5"}, quota: 9 * GiB, array: 5},
		queueJob{user: u1, name: "qwhole1", args: []string{"--gres=gpu:1"}},
		queueJob{user: u2, name: "qwhole2", args: []string{"--gpus=1"}},
		queueJob{user: u1, name: "qmulti", args: []string{"--gpus=2", "--gpu-mem=3G"}, quota: 3 * GiB},
	)
	total := 0
	for _, j := range jobs {
		total += max(1, j.array)
	}
	if total < 40 {
		t.Fatalf("only %d jobs in the queue", total)
	}
	app := c.bin("target_app")
	s := c.startSampler()
	type submitted struct {
		queueJob
		id string
	}
	var subs []submitted
	for _, j := range jobs {
		// Each job fills its quota in quarters and holds it for a while, so
		// jobs overlap; the fifth quarter must be refused.
		step := j.quota / 4
		run := fmt.Sprintf("%s --step %d --count 5 --hold 2", app, step)
		if j.quota == 0 {
			run = app + " --step 1G --count 2 --hold 2" // a whole GPU: no quota
		}
		out := filepath.Join(j.user.dir, j.name+"-%j.out")
		if j.array > 0 {
			out = filepath.Join(j.user.dir, j.name+"-%A_%a.out")
		}
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH --output=%s\necho \"event=job id=$SLURM_JOB_ID node=$(hostname) cvd=$CUDA_VISIBLE_DEVICES\"\n%s\n",
			out, run)
		subs = append(subs, submitted{j, c.sbatch(t, j.user, j.name, script, j.args...)})
	}
	t.Logf("%d jobs submitted (%d sbatch calls)", total, len(subs))
	if err := waitFor(6*time.Minute, func() error {
		out, err := c.cmd(nil, "squeue", "-h", "-o", "%i %T").Output()
		if err != nil {
			return err
		}
		if q := strings.TrimSpace(string(out)); q != "" {
			return fmt.Errorf("%d jobs still queued", len(strings.Split(q, "\n")))
		}
		return nil
	}); err != nil {
		s.finish(t)
		t.Fatal(err)
	}
	s.finish(t)

	perNode := map[string]int{}
	for _, sub := range subs {
		var files []string
		if sub.array > 0 {
			files, _ = filepath.Glob(filepath.Join(sub.user.dir, sub.name+"-"+sub.id+"_*.out"))
			if len(files) != sub.array {
				t.Errorf("array %s: %d output files, want %d", sub.name, len(files), sub.array)
			}
		} else {
			files = []string{filepath.Join(sub.user.dir, sub.name+"-"+sub.id+".out")}
		}
		for _, f := range files {
			text := readFile(t, f)
			e := find(events(text), "job")
			if e == nil {
				t.Errorf("%s: no job line:\n%s", f, text)
				continue
			}
			j, err := c.job(e["id"])
			if err != nil || j["JobState"] != "COMPLETED" {
				t.Errorf("job %s (%s): %s %v\n%s", e["id"], sub.name, j["JobState"], err, text)
				continue
			}
			perNode[e["node"]]++
			a := parseApp(t, text)
			if sub.quota == 0 {
				want := uint64(16 * GiB)
				if e["node"] == "tn2" {
					want = 40 * GiB
				}
				if a.total != want || a.allowed != 2 {
					t.Errorf("whole-GPU job %s on %s: total %d allowed %d, want the whole %d-byte GPU", e["id"], e["node"], a.total, a.allowed, want)
				}
				continue
			}
			if a.total != sub.quota || a.allowed != 4 || a.denied != 1 {
				t.Errorf("job %s (%s, --gpu-mem %d) on %s: total %d allowed %d denied %d; want its own quota, filled, then refused",
					e["id"], sub.name, sub.quota, e["node"], a.total, a.allowed, a.denied)
			}
			if sub.quota > 16*GiB && e["node"] != "tn2" {
				t.Errorf("job %s asked %d bytes and ran on %s, whose GPUs hold 16 GiB", e["id"], sub.quota, e["node"])
			}
		}
	}
	t.Logf("jobs per node: %v", perNode)
	packed := 0
	for _, n := range c.nodes {
		if err := n.waitIdleGPUs(30 * time.Second); err != nil {
			t.Error(err)
		}
		packed = max(packed, s.maxShare[n.Name])
	}
	if packed < 2 {
		t.Errorf("no GPU ever held two jobs at once (%v): nothing was packed", s.maxShare)
	}
}

func mustSize(t *testing.T, s string) uint64 {
	t.Helper()
	var v uint64
	if _, err := fmt.Sscanf(strings.TrimSuffix(s, "G"), "%d", &v); err != nil {
		t.Fatalf("size %q", s)
	}
	return v * GiB
}

// srun -N2 --gpu-mem=4G: a session on both nodes, each task limited on its
// own node, both released at the end.
func TestTwoNodeSrun(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	marker := filepath.Join(u.dir, "two-node-go")
	script := fmt.Sprintf(`echo "event=task node=$(hostname) job=$SLURM_JOB_ID session=$GPUSLICE_SESSION"; %s --step 1G --count 5 --hold 1 > %s/two-node-$(hostname).out; until [ -e %s ]; do sleep 0.1; done`,
		c.bin("target_app"), u.dir, marker)
	done := make(chan result, 1)
	go func() {
		done <- run(context.Background(), c.cmd(u, "srun", "-v", "-N2", "--gpu-mem=4G", "sh", "-c", script))
	}()
	// While it runs, each node has the job's session with 4 GiB on one GPU.
	var id string
	if err := waitFor(90*time.Second, func() error {
		out, err := c.cmd(nil, "squeue", "-h", "-u", u.name, "-t", "running", "-o", "%i").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			return fmt.Errorf("job not running yet")
		}
		id = strings.TrimSpace(string(out))
		for _, n := range c.nodes {
			if _, err := os.Stat(filepath.Join(u.dir, "two-node-"+n.Name+".out")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		s, err := n.session(id)
		if err != nil {
			t.Fatalf("session %s on %s: %v", id, n.Name, err)
		}
		if len(s.GPUs) != 1 || s.GPUs[0].LimitBytes != 4*GiB || s.UID != u.uid {
			t.Errorf("session %s on %s: %+v, want 4 GiB on one GPU owned by %s", id, n.Name, s.GPUs, u.name)
		}
	}
	if err := writeFile(marker, "", 0o644); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("srun -N2 did not finish")
	}
	if r.code != 0 {
		t.Fatalf("srun -N2: %s", r)
	}
	seen := map[string]bool{}
	for _, e := range events(r.stdout) {
		if e["event"] == "task" {
			seen[e["node"]] = true
			if e["session"] != id {
				t.Errorf("task on %s: session %q, want %s", e["node"], e["session"], id)
			}
		}
	}
	if len(seen) != 2 {
		t.Fatalf("tasks ran on %v, want both nodes:\n%s", seen, r)
	}
	for _, n := range c.nodes {
		a := parseApp(t, readFile(t, filepath.Join(u.dir, "two-node-"+n.Name+".out")))
		if a.total != 4*GiB || a.allowed != 4 || a.denied != 1 {
			t.Errorf("task on %s: total %d allowed %d denied %d, want its node's 4 GiB", n.Name, a.total, a.allowed, a.denied)
		}
	}
	c.assertReleased(t, id)
	for _, n := range c.nodes {
		if h := n.history(t, id); h.GPUs[0].PeakBytes != 4*GiB || h.GPUs[0].Denied != 1 {
			t.Errorf("report of job %s on %s: %+v", id, n.Name, h.GPUs[0])
		}
	}
}

// Regression (drain by request): a --gpu-mem larger than every GPU used to
// pass the submit check (no max= in the shipped plugstack line), be refused
// by the Prolog and drain the node. Now slurmctld refuses it at submission,
// naming the largest GPU (of the partition, or of the nodes the job
// names); a request only the bigger node's GPUs can hold is placed there.
func TestDrainByRequest(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	s := c.startSampler()
	for _, argv := range [][]string{{"srun", "true"}, {"sbatch", "--wrap", "true"}, {"salloc", "true"}} {
		r := run(ctxFor(t, time.Minute), c.cmd(u, argv[0], append([]string{"--gpu-mem=41G"}, argv[1:]...)...))
		want := "gpuslice: --gpu-mem=41GiB is larger than any GPU in partition gpu: the largest has 40GiB"
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s --gpu-mem=41G: %s\nwant a refusal saying %q", argv[0], r, want)
		}
	}
	// Naming a node whose GPUs are too small: refused too (Slurm would
	// keep it pending for ever).
	r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "-w", "tn1", "--gpu-mem=20G", "true"))
	if want := "gpuslice: --gpu-mem=20GiB is larger than any GPU in nodes tn1: the largest has 16GiB"; r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("srun -w tn1 --gpu-mem=20G: %s\nwant a refusal saying %q", r, want)
	}
	r = run(ctxFor(t, time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=20G", "sh", "-c", `echo "event=task node=$(hostname)"`))
	if r.code != 0 {
		t.Fatalf("srun --gpu-mem=20G: %s", r)
	}
	if e := find(events(r.stdout), "task"); e["node"] != "tn2" {
		t.Errorf("--gpu-mem=20G ran on %v, want tn2 (tn1's GPUs hold 16 GiB)", e)
	}
	s.finish(t)
	c.assertReleased(t, jobID(t, r))
}

// Regression (drain by overlap): two jobs whose quotas do not fit one GPU
// together used to be started on it together; the Prolog refused the
// second and the node drained. Now the scheduler holds the later job until
// a GPU has room: all complete, nothing drains.
func TestDrainByOverlap(t *testing.T) {
	c := needCluster(t)
	alice, bob := c.users["gsltest1"], c.users["gsltest2"]
	n := c.nodeByName("tn1") // 2 x 16 GiB
	s := c.startSampler()
	gate := filepath.Join(alice.dir, "overlap-go")
	hold := func(u *testUser, name, mem string) string {
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=%s\n#SBATCH --output=%s/%s-%%j.out\necho event=start\n%s --step %s --count 1 --hold 1\nuntil [ -e %s ]; do sleep 0.1; done\n",
			mem, u.dir, name, c.bin("target_app"), mem, gate)
		return c.sbatch(t, u, name, script, "-w", n.Name)
	}
	a1 := hold(alice, "overlap-a1", "12G")
	a2 := hold(alice, "overlap-a2", "12G")
	c.waitSession(t, a1, 0, 0, 90*time.Second)
	c.waitSession(t, a2, 0, 0, 90*time.Second)
	b := hold(bob, "overlap-b", "8G")
	// Neither GPU has 8 GiB free: bob's job waits, it does not start.
	time.Sleep(3 * time.Second)
	if j, _ := c.job(b); j["JobState"] != "PENDING" {
		t.Errorf("bob's 8G job is %s while both 16 GiB GPUs hold 12 GiB, want PENDING", j["JobState"])
	}
	if err := writeFile(gate, "", 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a1, a2, b} {
		if j := c.waitJobEnd(t, id, 3*time.Minute); j["JobState"] != "COMPLETED" {
			t.Errorf("job %s: %s (%s)", id, j["JobState"], j["Reason"])
		}
	}
	s.finish(t)
	for _, id := range []string{a1, a2, b} {
		c.assertReleased(t, id)
	}
	if h := c.history(t, b); h.GPUs[0].LimitBytes != 8*GiB || h.GPUs[0].PeakBytes != 8*GiB {
		t.Errorf("bob's job: %+v, want its 8 GiB", h.GPUs[0])
	}
}

// The S22 case: a job without --gpu-mem may not take memory a neighbour
// was promised. It gets no GPU; the neighbour gets its whole quota.
func TestNoQuotaJobCannotSteal(t *testing.T) {
	c := needCluster(t)
	alice, bob := c.users["gsltest1"], c.users["gsltest2"]
	r := run(ctxFor(t, time.Minute), c.cmd(bob, "srun", "-w", "tn1", c.bin("target_app"), "--step", "7G", "--count", "1"))
	if r.code == 0 || !strings.Contains(r.stdout, "cudaErrorNoDevice") || strings.Contains(r.stdout, "status=allowed") {
		t.Errorf("bob's job without --gpu-mem: %s\nwant no GPU (cudaErrorNoDevice)", r)
	}
	r = run(ctxFor(t, time.Minute), c.cmd(alice, "srun", "-v", "-w", "tn1", "--gpu-mem=4G", c.bin("target_app"), "--step", "1G", "--count", "5"))
	if a := parseApp(t, r.stdout); r.code != 0 || a.total != 4*GiB || a.allowed != 4 {
		t.Errorf("alice's 4G job: %s", r)
	}
	c.assertReleased(t, jobID(t, r))
}

// Requests that would bypass the translation are refused at submission.
func TestGresShardRefused(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	before := c.jobCount(t)
	for _, args := range [][]string{{"--gres=shard:100"}, {"--gres=shard:100", "--gpu-mem=1G"}} {
		r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", append(args, "true")...))
		if r.code == 0 || !strings.Contains(r.stderr, "gpuslice: --gres=shard is not accepted here: ask for GPU memory with --gpu-mem=SIZE") {
			t.Errorf("srun %v: %s", args, r)
		}
	}
	if after := c.jobCount(t); after != before {
		t.Errorf("%d jobs after refused submissions, %d before", after, before)
	}
	// Nor can a user change a job's GPU requests once it is queued.
	id := c.sbatch(t, u, "held", "#!/bin/sh\ntrue\n", "--hold", "--gpu-mem=1G")
	r := run(ctxFor(t, time.Minute), c.cmd(u, "scontrol", "update", "jobid="+id, "TresPerNode="+slurm.gres+"shard:1"))
	if r.code == 0 {
		t.Errorf("scontrol update TresPerNode as the owner: %s", r)
	}
	want := fmt.Sprintf("gpuslice: uid %d may not change the GPU requests of job %s (tres_per_node)", u.uid, id)
	if log := readFile(t, c.path("log", "slurmctld.log")); !strings.Contains(log, want) {
		t.Errorf("slurmctld's log lacks %q", want)
	}
	if j, _ := c.job(id); j["TresPerNode"] != slurm.gres+"shard:1024" {
		t.Errorf("job %s TresPerNode=%s after the refused update, want %sshard:1024", id, j["TresPerNode"], slurm.gres)
	}
}

// commitOutOfBand commits quota bytes on each of n's two GPUs outside
// Slurm (sessions prefix0 and prefix1, as an admin could), deleted when
// the test ends.
func (n *node) commitOutOfBand(t *testing.T, prefix string, quota uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := n.client()
	defer cl.Close()
	for _, g := range []string{"0", "1"} {
		id := prefix + g
		if _, err := cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: 0, QuotaBytes: quota, GPUs: []string{g}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = n.client().DeleteSession(context.Background(), id) })
	}
}

// A quota gpusliced refuses on the node (here: an admin committed memory
// outside Slurm, which the scheduler cannot know) fails the job with one
// line naming the GPU, what is free and what was asked; the node stays in
// service (before, the Prolog failed and drained it).
func TestNodeRefusalFailsJobNotNode(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	n := c.nodeByName("tn1")
	n.commitOutOfBand(t, "out-of-band-", 15*GiB)
	s := c.startSampler()
	r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "-v", "-w", n.Name, "--gpu-mem=4G", c.bin("target_app"), "--step", "1G", "--count", "1"))
	id := jobID(t, r)
	t.Logf("srun's output:\n%s", r.stderr)
	want := "gpuslice: job " + id + " cannot start on node tn1: GPU memory quota refused: GPU "
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "asked 4GiB, 1GiB free") {
		t.Errorf("srun on a GPU gpusliced has no room on: %s\nwant %q ... asked 4GiB, 1GiB free", r, want)
	}
	if strings.Contains(r.stdout, "status=allowed") {
		t.Errorf("the refused job ran its program:\n%s", r.stdout)
	}
	lines := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "GPU memory quota refused") {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("%d refusal lines in srun's output, want 1:\n%s", lines, r.stderr)
	}
	j := c.waitJobEnd(t, id, time.Minute)
	if j["JobState"] != "FAILED" {
		t.Errorf("refused job %s: %s, want FAILED", id, j["JobState"])
	}
	// sbatch: the line is in the job's output file.
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=4G\n#SBATCH --output=%s/refused-%%j.out\necho ran\n", u.dir)
	bid := c.sbatch(t, u, "refused", script, "-w", n.Name)
	if j := c.waitJobEnd(t, bid, time.Minute); j["JobState"] != "FAILED" {
		t.Errorf("refused batch job %s: %s, want FAILED", bid, j["JobState"])
	}
	out := readFile(t, filepath.Join(u.dir, "refused-"+bid+".out"))
	if !strings.Contains(out, "gpuslice: job "+bid+" cannot start on node tn1: GPU memory quota refused") || strings.Contains(out, "ran") {
		t.Errorf("batch output of refused job %s:\n%s", bid, out)
	}
	s.finish(t)
	if _, err := os.Stat(filepath.Join(n.dir, "run", "refused", id)); !os.IsNotExist(err) {
		t.Errorf("the refusal of job %s outlived its Epilog: %v", id, err)
	}
	// Idle, or (Slurm 24.11) "planned": idle and reserved by the backfill
	// scheduler for a pending job, which the test's later jobs can be.
	if st, _ := c.nodeState(n.Name); st != "idle" && st != "planned" {
		t.Errorf("node %s is %q after refusals, want idle (in service)", n.Name, st)
	}
	ids := []string{id, bid}
	sort.Strings(ids)
	for _, jid := range ids {
		if _, err := n.session(jid); err == nil {
			t.Errorf("refused job %s has a session", jid)
		}
	}
}
