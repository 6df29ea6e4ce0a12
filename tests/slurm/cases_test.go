package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// srun --gpu-mem=8G: the job sees an 8 GiB GPU and cannot allocate past it.
func TestSrunQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	for _, api := range []string{"runtime", "driver"} {
		t.Run(api, func(t *testing.T) {
			r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=8G",
				c.bin("target_app"), "--api", api, "--step", "1G", "--count", "9"))
			if r.code != 0 {
				t.Fatalf("srun: %s", r)
			}
			id := jobID(t, r)
			app := parseApp(t, r.stdout)
			if app.total != 8*GiB || app.freeBefore != 8*GiB {
				t.Errorf("meminfo before allocating: total %d free %d, want 8 GiB both", app.total, app.freeBefore)
			}
			if app.allowed != 8 || app.denied != 1 {
				t.Errorf("allowed %d denied %d, want 8 and 1 (1 GiB steps under 8 GiB)\n%s", app.allowed, app.denied, r.stdout)
			}
			if e := find(app.evs, "alloc", "index", "9"); e["status"] != "denied" || e["error"] == "" {
				t.Errorf("9th GiB: %v, want denied with an out-of-memory error", e)
			}
			rep := c.assertReleased(t, id)
			h := c.history(t, id)
			if len(h.GPUs) != 1 || h.GPUs[0].LimitBytes != 8*GiB || h.GPUs[0].PeakBytes != 8*GiB ||
				h.GPUs[0].FinalUsedBytes != 0 || h.GPUs[0].Denied != 1 {
				t.Errorf("history of job %s: %+v", id, h)
			}
			if h.UID != u.uid {
				t.Errorf("session owner uid %d, want %d (%s)", h.UID, u.uid, u.name)
			}
			if !strings.Contains(rep, id) {
				t.Errorf("gpuslice report %s does not name the job:\n%s", id, rep)
			}
		})
	}
}

// One quota per job: a program started by the batch script and two srun
// steps share #SBATCH --gpu-mem=4G.
func TestSbatchSharedQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	app := c.bin("target_app")
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=4G
#SBATCH --output=%[1]s/shared-%%j.out
cd %[1]s
# a program of the batch script itself: 1 GiB
%[2]s --step 1G --count 1 --hold 120 > bg.out 2>&1 &
bg=$!
# step 1: 2 GiB, held while step 2 runs
srun --overlap --output=step1.out %[2]s --step 1G --count 2 --hold 120 &
s1=$!
i=0
until grep -q event=hold bg.out 2>/dev/null && grep -q event=hold step1.out 2>/dev/null; do
	i=$((i+1)); [ $i -gt 900 ] && { echo holders_not_ready; exit 3; }
	sleep 0.1
done
# step 2: 3 x 512 MiB, with 1 GiB of the job's 4 GiB left
srun --overlap --output=step2.out %[2]s --step 512M --count 3
echo step2_exit=$?
kill $bg $s1
wait
touch holders-gone
i=0
until [ -e shared-go ]; do i=$((i+1)); [ $i -gt 900 ] && exit 3; sleep 0.1; done
echo done
`, u.dir, app)
	id := c.sbatch(t, u, "shared", script)
	// Once the holders are killed, gpusliced gives their 3 GiB back while
	// the job still runs.
	if err := waitFor(2*time.Minute, func() error {
		_, err := os.Stat(filepath.Join(u.dir, "holders-gone"))
		return err
	}); err != nil {
		j, _ := c.job(id)
		t.Fatalf("the batch script did not get past its steps: %v (job %v)", err, j)
	}
	c.waitSession(t, id, 0, 0, 30*time.Second)
	if err := writeFile(filepath.Join(u.dir, "shared-go"), "", 0o644); err != nil {
		t.Fatal(err)
	}
	j := c.waitJobEnd(t, id, 3*time.Minute)
	out := readFile(t, filepath.Join(u.dir, "shared-"+id+".out"))
	if !strings.Contains(out, "step2_exit=0") || !strings.Contains(out, "done") {
		t.Fatalf("batch script (job %s: %s):\n%s", id, j["JobState"], out)
	}
	bg := parseApp(t, readFile(t, filepath.Join(u.dir, "bg.out")))
	s1 := parseApp(t, readFile(t, filepath.Join(u.dir, "step1.out")))
	s2 := parseApp(t, readFile(t, filepath.Join(u.dir, "step2.out")))
	for name, a := range map[string]appRun{"background program": bg, "step 1": s1, "step 2": s2} {
		if a.total != 4*GiB {
			t.Errorf("%s sees total %d, want the job's 4 GiB", name, a.total)
		}
	}
	if bg.allowed != 1 || s1.allowed != 2 {
		t.Errorf("holders got %d and %d GiB, want 1 and 2", bg.allowed, s1.allowed)
	}
	if s2.freeBefore != 1*GiB || s2.allowed != 2 || s2.denied != 1 {
		t.Errorf("step 2: free %d before, allowed %d, denied %d; want 1 GiB free, 2 allowed, 1 denied (shared quota)",
			s2.freeBefore, s2.allowed, s2.denied)
	}
	c.assertReleased(t, id)
	h := c.history(t, id)
	g := h.GPUs[0]
	if g.LimitBytes != 4*GiB || g.PeakBytes != 4*GiB || g.Denied != 1 || g.FinalUsedBytes != 0 {
		t.Errorf("history of job %s: %+v, want limit = peak = 4 GiB, 1 denied, final 0", id, g)
	}
	if g.ReclaimedBytes != 3*GiB {
		t.Errorf("reclaimed %d bytes, want 3 GiB (the killed holders)", g.ReclaimedBytes)
	}
}

// salloc --gpu-mem=2G, then srun inside: the same quota; srun may not ask
// for another one.
func TestSallocQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "salloc", "--gpu-mem=2G", "sh", "-c",
		"echo event=job job=$SLURM_JOB_ID; srun "+c.bin("target_app")+" --step 1G --count 3; echo event=step exit=$?; "+
			"srun --gpu-mem=1G true; echo event=other exit=$?; srun --gpu-mem=2048 true; echo event=same exit=$?"))
	if r.code != 0 {
		t.Fatalf("salloc: %s", r)
	}
	id := jobID(t, r)
	app := parseApp(t, r.stdout)
	if app.total != 2*GiB || app.allowed != 2 || app.denied != 1 {
		t.Errorf("total %d, allowed %d, denied %d; want 2 GiB, 2, 1\n%s", app.total, app.allowed, app.denied, r.stdout)
	}
	evs := events(r.stdout)
	if e := find(evs, "step"); e["exit"] != "0" {
		t.Errorf("srun target_app: %v", e)
	}
	if e := find(evs, "other"); e["exit"] != "1" || !strings.Contains(r.stderr, "gpuslice: --gpu-mem=1G differs from job "+id+"'s quota of 2GiB") {
		t.Errorf("srun --gpu-mem=1G inside a 2G allocation: %v, want exit 1 with the reason\n%s", e, r.stderr)
	}
	if e := find(evs, "same"); e["exit"] != "0" {
		t.Errorf("srun --gpu-mem=2048 (= 2G) inside the allocation: %v, want exit 0\n%s", e, r.stderr)
	}
	c.assertReleased(t, id)
	if h := c.history(t, id); h.GPUs[0].LimitBytes != 2*GiB || h.GPUs[0].PeakBytes != 2*GiB {
		t.Errorf("history of job %s: %+v", id, h.GPUs[0])
	}
}

// Bad sizes, sizes over max= (the plugin, in srun/sbatch/salloc) and sizes
// over the largest GPU (job_submit.lua, in slurmctld) are refused before
// anything is submitted.
func TestRejectedAtSubmit(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	before := c.jobCount(t)
	values := []struct{ val, msg string }{
		{"8X", "gpuslice: invalid --gpu-mem '8X': expected a positive size"},
		{"0", "gpuslice: invalid --gpu-mem '0': expected a positive size"},
		{"-4G", "gpuslice: invalid --gpu-mem '-4G': expected a positive size"},
		{"1.5G", "gpuslice: invalid --gpu-mem '1.5G': expected a positive size"},
		{"65G", "gpuslice: invalid --gpu-mem '65G': larger than this cluster's maximum of 64GiB"},
		// Under max= but larger than any GPU: job_submit.lua refuses it.
		{"48G", "gpuslice: --gpu-mem=48GiB is larger than any GPU in partition gpu: the largest has 40GiB"},
	}
	commands := map[string][]string{
		"srun":   {"srun", "true"},
		"sbatch": {"sbatch", "--wrap", "true"},
		"salloc": {"salloc", "true"},
	}
	for _, v := range values {
		for name, argv := range commands {
			t.Run(name+" "+v.val, func(t *testing.T) {
				args := append([]string{"--gpu-mem=" + v.val}, argv[1:]...)
				r := run(ctxFor(t, time.Minute), c.cmd(u, argv[0], args...))
				if r.code != 1 {
					t.Fatalf("exit %d, want 1: %s", r.code, r)
				}
				if !strings.Contains(r.stderr, v.msg) {
					t.Fatalf("stderr lacks %q: %s", v.msg, r.stderr)
				}
			})
		}
	}
	if after := c.jobCount(t); after != before {
		t.Fatalf("slurmctld knows %d jobs after the rejected submissions, %d before", after, before)
	}
	// The count does move when a job is created.
	if r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "--gpu-mem=40G", "true")); r.code != 0 {
		t.Fatalf("srun --gpu-mem=40G (= the largest GPU): %s", r)
	}
	if after := c.jobCount(t); after != before+1 {
		t.Fatalf("%d jobs after one accepted submission, want %d", after, before+1)
	}
}

// What a task's environment holds with and without a quota.
func TestTaskEnvironment(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	show := `echo "event=env job=$SLURM_JOB_ID preload=${LD_PRELOAD:-none} session=${GPUSLICE_SESSION:-none} sock=${GPUSLICE_IPC_SOCK:-none}"`

	t.Run("quota: interceptor appended to the user's LD_PRELOAD", func(t *testing.T) {
		r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "--gpu-mem=1G", "--export=ALL,LD_PRELOAD=libm.so.6", "sh", "-c", show))
		if r.code != 0 {
			t.Fatalf("srun: %s", r)
		}
		e := find(events(r.stdout), "env")
		if e["preload"] != "libm.so.6:"+c.bin("interceptor") || e["session"] != e["job"] || e["sock"] != c.ipcSock {
			t.Fatalf("task environment %v; want preload=libm.so.6:%s session=<job id> sock=%s", e, c.bin("interceptor"), c.ipcSock)
		}
		c.assertReleased(t, e["job"])
	})

	// No neighbour steals a quota: a job that asks for neither a GPU nor
	// GPU memory gets no GPU (nogpu=hide, the default).
	t.Run("no GPU asked: nothing injected, no GPU visible", func(t *testing.T) {
		r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "sh", "-c",
			show+`; echo "event=cvd value=[${CUDA_VISIBLE_DEVICES-unset}]"; `+c.bin("target_app")+" --step 1G --count 1; echo event=app exit=$?"))
		if r.code != 0 {
			t.Fatalf("srun: %s", r)
		}
		evs := events(r.stdout)
		e := find(evs, "env")
		if e["preload"] != "none" || e["session"] != "none" || e["sock"] != "none" {
			t.Fatalf("task environment of a job without --gpu-mem: %v", e)
		}
		if cvd := find(evs, "cvd"); cvd["value"] != "[]" {
			t.Errorf("CUDA_VISIBLE_DEVICES of a job that asked no GPU: %v, want empty", cvd)
		}
		if find(evs, "alloc") != nil || find(evs, "app")["exit"] == "0" || !strings.Contains(r.stdout, "cudaErrorNoDevice") {
			t.Errorf("a job that asked no GPU used one:\n%s", r.stdout)
		}
		if _, err := c.session(e["job"]); err == nil {
			t.Fatalf("a session exists for job %s, which asked for no quota", e["job"])
		}
		if env := c.prologEnv(t, e["job"], c.jobNode(t, e["job"])); strings.Contains(env, "SPANK_GPU_MEM") {
			t.Fatalf("the Prolog of a job without --gpu-mem got a quota:\n%s", env)
		}
		if err := c.waitNodeState("idle", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// Jobs belong to their (non-root) submitter; another user's process
// cannot attach to that session. scancel of a job holding memory gives it
// all back.
func TestOtherUserCannotAttach(t *testing.T) {
	c := needCluster(t)
	u1, u2 := c.users["gsltest1"], c.users["gsltest2"]
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=1G\n#SBATCH --output=%s/holder-%%j.out\nsrun %s --step 512M --count 1 --hold 120\n",
		u1.dir, c.bin("target_app"))
	id := c.sbatch(t, u1, "holder", script)
	c.waitSession(t, id, 1, 512*MiB, 90*time.Second)
	s, err := c.session(id)
	if err != nil {
		t.Fatal(err)
	}
	if s.UID != u1.uid {
		t.Fatalf("session %s owned by uid %d, want %d (%s)", id, s.UID, u1.uid, u1.name)
	}

	// gsltest2, logged in to the node, points the interceptor at
	// gsltest1's session.
	cmd := c.jobNode(t, id).onNode(u2, c.bin("target_app"), "--step", "256M", "--count", "1")
	cmd.Env = append(cmd.Env, "LD_PRELOAD="+c.bin("interceptor"), "GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+c.ipcSock)
	r := run(ctxFor(t, time.Minute), cmd)
	evs := events(r.stdout)
	if sum := find(evs, "summary"); sum == nil || sum["allowed"] != "0" {
		t.Fatalf("a process of %s allocated in %s's session: %s", u2.name, u1.name, r)
	}
	if !strings.Contains(r.stderr, "gpuslice") {
		t.Errorf("no gpuslice message on stderr of the refused process: %s", r)
	}
	c.waitSession(t, id, 1, 512*MiB, 10*time.Second) // unchanged: one process, 512 MiB

	// Slurm itself keeps gsltest2 out of the job.
	r = run(ctxFor(t, time.Minute), c.cmd(u2, "srun", "--jobid="+id, "--overlap", "true"))
	if r.code == 0 {
		t.Errorf("%s ran a step in %s's job %s: %s", u2.name, u1.name, id, r)
	}
	// The owner's step attached from outside the allocation (srun --jobid):
	// no --gpu-mem in sight, the plugin asks gpusliced whether the job has
	// a session and injects the interceptor.
	r = run(ctxFor(t, time.Minute), c.cmd(u1, "srun", "--jobid="+id, "--overlap", "sh", "-c",
		`echo "event=env preload=${LD_PRELOAD:-none} session=${GPUSLICE_SESSION:-none}"; `+
			c.bin("target_app")+" --step 256M --count 3"))
	if r.code != 0 {
		t.Fatalf("srun --jobid=%s as the owner: %s", id, r)
	}
	if e := find(events(r.stdout), "env"); e["session"] != id || !strings.HasSuffix(e["preload"], c.bin("interceptor")) {
		t.Errorf("step attached with srun --jobid: %v, want the job's session and the interceptor", e)
	}
	if app := parseApp(t, r.stdout); app.total != 1*GiB || app.freeBefore != 512*MiB || app.allowed != 2 || app.denied != 1 {
		t.Errorf("step attached with srun --jobid: total %d free %d allowed %d denied %d; want the job's quota, shared",
			app.total, app.freeBefore, app.allowed, app.denied)
	}

	if out, err := c.cmd(u1, "scancel", id).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v: %s", id, err, out)
	}
	j := c.waitJobEnd(t, id, time.Minute)
	if j["JobState"] != "CANCELLED" {
		t.Errorf("job %s is %s after scancel", id, j["JobState"])
	}
	c.assertReleased(t, id)
	// Peak: the holder's 512 MiB plus the owner's step's 512 MiB; the
	// holder's bytes were reclaimed when scancel killed it.
	if g := c.history(t, id).GPUs[0]; g.PeakBytes != 1*GiB || g.Denied != 1 || g.ReclaimedBytes != 512*MiB || g.FinalUsedBytes != 0 {
		t.Errorf("history after scancel: %+v, want peak 1 GiB, 1 denied, 512 MiB reclaimed, nothing left", g)
	}
}

// kill -9 of a task holding memory: gpusliced gives its bytes back while
// the job still runs (the job's next program gets the whole quota), and
// nothing is left after the job.
func TestKilledTask(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	app := c.bin("target_app")
	marker := filepath.Join(u.dir, "killed-go")
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=1G
#SBATCH --output=%[1]s/killed-%%j.out
srun %[2]s --step 256M --count 2 --hold 120
echo event=step exit=$?
i=0
until [ -e %[3]s ]; do i=$((i+1)); [ $i -gt 900 ] && exit 3; sleep 0.1; done
%[2]s --step 1G --count 1
`, u.dir, app, marker)
	id := c.sbatch(t, u, "killed", script)
	c.waitSession(t, id, 1, 512*MiB, 90*time.Second)
	s, err := c.session(id)
	if err != nil {
		t.Fatal(err)
	}
	pid := int(s.Processes[0].PID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	// Reclaimed while the job goes on.
	c.waitSession(t, id, 0, 0, 30*time.Second)
	if j, err := c.job(id); err != nil || j["JobState"] != "RUNNING" {
		t.Fatalf("job %s after the kill: %v %v", id, j["JobState"], err)
	}
	if err := writeFile(marker, "", 0o644); err != nil {
		t.Fatal(err)
	}
	c.waitJobEnd(t, id, 2*time.Minute)
	out := readFile(t, filepath.Join(u.dir, "killed-"+id+".out"))
	evs := events(out)
	var after appRun
	for i, e := range evs {
		if e["event"] == "step" {
			if e["exit"] == "0" {
				t.Errorf("the killed step reported success\n%s", out)
			}
			after = parseApp(t, eventsText(evs[i+1:]))
		}
	}
	if after.total != 1*GiB || after.freeBefore != 1*GiB || after.allowed != 1 {
		t.Errorf("after kill -9: total %d free %d allowed %d; want the whole 1 GiB back\n%s",
			after.total, after.freeBefore, after.allowed, out)
	}
	c.assertReleased(t, id)
	if g := c.history(t, id).GPUs[0]; g.ReclaimedBytes != 512*MiB || g.FinalUsedBytes != 0 || g.PeakBytes != 1*GiB {
		t.Errorf("history: %+v, want 512 MiB reclaimed, peak 1 GiB, nothing left", g)
	}
}

// eventsText turns events back into key=value lines.
func eventsText(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString("event=" + e["event"])
		for k, v := range e {
			if k != "event" {
				b.WriteString(" " + k + "=" + v)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// With gres/gpu (a whole GPU) the Prolog sets the quota on the job's GPUs
// (SLURM_JOB_GPUS); the task sees them through CUDA_VISIBLE_DEVICES.
func TestGresGPU(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "-v", "--gres=gpu:1", "--gpu-mem=3G", "sh", "-c",
		`echo "event=env cvd=${CUDA_VISIBLE_DEVICES:-none}"; `+c.bin("target_app")+" --step 1G --count 4"))
	if r.code != 0 {
		t.Fatalf("srun --gres=gpu:1: %s", r)
	}
	app := parseApp(t, r.stdout)
	if app.total != 3*GiB || app.allowed != 3 || app.denied != 1 {
		t.Errorf("total %d allowed %d denied %d, want the 3 GiB quota", app.total, app.allowed, app.denied)
	}
	id := jobID(t, r)
	c.assertReleased(t, id)
	n := c.jobNode(t, id)
	env := c.prologEnv(t, id, n)
	for _, want := range []string{"SPANK_GPU_MEM=3221225472\n", fmt.Sprintf("SLURM_JOB_UID=%d\n", u.uid)} {
		if !strings.Contains(env, want) {
			t.Errorf("the Prolog's environment lacks %q:\n%s", want, env)
		}
	}
	gpus, err := n.gpus()
	if err != nil {
		t.Fatal(err)
	}
	// Where Slurm keeps a GPU held as gres/gpu away from shards the job
	// shares its node and holds the GPU it asked for. Elsewhere (22.05) it
	// has the node to itself, and Slurm gives an exclusive job every GPU
	// of the node; its step sees the one it asked for.
	held := c.jobGPUs(t, id, n)
	// The task sees one GPU: the first of the job's, by its index or
	// renumbered from 0 (ConstrainDevices).
	if e := find(events(r.stdout), "env"); e["cvd"] != "0" && e["cvd"] != held[0] {
		t.Errorf("CUDA_VISIBLE_DEVICES in the task: %v, want 0 or %s", e, held[0])
	}
	j, _ := c.job(id)
	// (26.05 shows OverSubscribe=NO for every job that does not ask to
	// oversubscribe: only 22.05's is checked.)
	if slurm.gresGPUApart {
		if len(held) != 1 {
			t.Errorf("whole-GPU job %s: GPUs %v; want the one it asked, the node shared", id, held)
		}
	} else if len(held) != len(gpus) || j["OverSubscribe"] != "NO" {
		t.Errorf("whole-GPU job %s: GPUs %v, OverSubscribe=%s; want all %d, a node of its own", id, held, j["OverSubscribe"], len(gpus))
	}
	h := c.history(t, id)
	if len(h.GPUs) != len(held) {
		t.Fatalf("session of job %s: %+v, want the quota on its GPUs %v", id, h.GPUs, held)
	}
	for i, g := range h.GPUs {
		k := atoi(held[i])
		if k < 0 || k >= len(gpus) {
			t.Fatalf("job %s: GPU %q is none of the node's %d", id, held[i], len(gpus))
		}
		want := gpus[k].UUID
		if g.UUID != want || g.LimitBytes != 3*GiB {
			t.Errorf("session of job %s: %+v, want 3 GiB on %s", id, g, want)
		}
	}
}

// Array tasks are separate jobs: each has its own session and quota.
func TestArrayTasks(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=1G
#SBATCH --array=1-2
#SBATCH --output=%[1]s/array-%%A-%%a.out
echo "event=env job=$SLURM_JOB_ID session=$GPUSLICE_SESSION"
%[2]s --step 512M --count 3
`, u.dir, c.bin("target_app"))
	arrayID := c.sbatch(t, u, "array", script)
	if err := waitFor(2*time.Minute, func() error {
		out, err := c.cmd(nil, "squeue", "-h", "-r", "-j", arrayID, "-o", "%i %T").Output()
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("array tasks still queued: %s", s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, task := range []string{"1", "2"} {
		out := readFile(t, filepath.Join(u.dir, "array-"+arrayID+"-"+task+".out"))
		e := find(events(out), "env")
		if e == nil || e["session"] != e["job"] || seen[e["job"]] {
			t.Fatalf("array task %s: %v; want its own job id as session\n%s", task, e, out)
		}
		seen[e["job"]] = true
		// Each task has a whole 1 GiB: two 512 MiB allocations, the third denied.
		if app := parseApp(t, out); app.total != 1*GiB || app.allowed != 2 || app.denied != 1 {
			t.Errorf("array task %s: total %d allowed %d denied %d", task, app.total, app.allowed, app.denied)
		}
		c.assertReleased(t, e["job"])
		if h := c.history(t, e["job"]); h.GPUs[0].LimitBytes != 1*GiB || h.GPUs[0].PeakBytes != 1*GiB {
			t.Errorf("session of array task %s: %+v", task, h.GPUs[0])
		}
	}
}
