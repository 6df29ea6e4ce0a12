package slurm

// The Prolog and Epilog run no Slurm command (SchedMD's Prolog and Epilog
// Guide: they "should not call Slurm commands (e.g. squeue, scontrol,
// sacctmgr, etc)"): what the Prolog must know comes from its environment,
// the Epilog talks to gpusliced only.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/prolog"
)

// ncJob is one job of TestPrologEpilogRunNoSlurmCommand's queue.
type ncJob struct {
	name  string
	user  *testUser
	args  []string // sbatch options
	nodes int      // nodes it runs on (its tasks: one per node)
	array int      // tasks, 0: not an array
	quota uint64   // the quota its processes must see; 0: whole GPUs, no session
	// comment is what Slurm must show as the job's Comment ("": not
	// checked).
	comment string
	// forge: the user tries to put the note in the comment of the held job
	// (scontrol update), then releases it.
	forge bool
}

// A queue of every kind of job, with plugstack.conf's default=, runs with
// no sacct, sacctmgr, scontrol or squeue started under a Prolog or an
// Epilog, on any node: shares (--gpu-mem), whole GPUs with and without
// --gpu-mem, jobs that get the default quota, an array, jobs on two
// nodes. The Prolog still tells whole GPUs from shares: a job given whole
// GPUs without --gpu-mem gets no session, a default-quota share its
// quota, also when its user wrote the note job_submit.lua leaves for
// whole GPUs in --comment or in the held job's comment. Every exec of the
// commands is seen as the kernel starts it (execWatch), with who started
// it; gpusliced's own runs, and the suite's, are reported, not counted.
func TestPrologEpilogRunNoSlurmCommand(t *testing.T) {
	c := needCluster(t)
	c.withPlugstack(t, "default=1G max="+maxQuota)
	w, err := watchExecs(c.dir, slurmCommandFiles())
	if err != nil {
		t.Fatalf("cannot watch Slurm's commands: %v", err)
	}
	watching := true
	closeWatch := func() ([]execRun, error) {
		watching = false
		return w.close()
	}
	t.Cleanup(func() {
		if watching {
			_, _ = w.close()
		}
	})

	u1, u2 := c.users["gsltest1"], c.users["gsltest2"]
	note := prolog.WholeGPUsNote
	jobs := []ncJob{
		{name: "share2g", user: u1, args: []string{"--gpu-mem=2G"}, quota: 2 * GiB},
		{name: "share3g", user: u2, args: []string{"--gpu-mem=3G"}, quota: 3 * GiB},
		{name: "default", user: u1, quota: 1 * GiB},
		{name: "forged", user: u2, args: []string{"--comment=" + note}, quota: 1 * GiB},
		{name: "forgedin", user: u1, args: []string{"--comment=mine " + note[:5] + note + note[5:]}, quota: 1 * GiB, comment: "mine"},
		{name: "forgemod", user: u2, args: []string{"--hold"}, quota: 1 * GiB, forge: true},
		{name: "wholeq", user: u1, args: []string{"--gpus=1", "--gpu-mem=2G"}, quota: 2 * GiB},
		{name: "whole", user: u2, args: []string{"--gres=gpu:1", "--comment=mine"}, comment: "mine " + note},
		{name: "whole2", user: u1, args: []string{"--gpus=2"}, comment: note},
		{name: "array", user: u2, args: []string{"--array=1-3"}, array: 3, quota: 1 * GiB},
		{name: "twonode", user: u1, args: []string{"-N2", "--gpu-mem=2G"}, nodes: 2, quota: 2 * GiB},
		{name: "twodefault", user: u2, args: []string{"-N2"}, nodes: 2, quota: 1 * GiB},
		{name: "twowhole", user: u1, args: []string{"-N2", "--gpus-per-node=1"}, nodes: 2, comment: note},
	}
	app := c.bin("target_app")
	ids := map[string]string{}
	for _, j := range jobs {
		prog := fmt.Sprintf("%s --step %d --count 5 --hold 1", app, j.quota/4)
		if j.quota == 0 {
			prog = app + " --step 1G --count 2 --hold 1"
		}
		// One task per node, each writing its own file.
		script := fmt.Sprintf(`#!/bin/sh
#SBATCH --output=%[1]s/%[2]s-%%j.batch
srun --ntasks-per-node=1 sh -c 'f=%[1]s/%[2]s-$SLURM_JOB_ID-$(hostname).out; echo "event=job id=$SLURM_JOB_ID node=$(hostname) session=${GPUSLICE_SESSION:-none}" >$f; %[3]s >>$f 2>&1'
`, j.user.dir, j.name, prog)
		ids[j.name] = c.sbatch(t, j.user, j.name, script, j.args...)
		if j.forge {
			id := ids[j.name]
			r := run(ctxFor(t, time.Minute), c.cmd(j.user, "scontrol", "update", "jobid="+id, "comment="+note))
			t.Logf("job %s (held): its user's scontrol update comment=%s: exit %d %s", id, note, r.code, strings.TrimSpace(r.stdout+r.stderr))
			if got := c.jobComment(t, id); strings.Contains(got, note) {
				t.Errorf("job %s: its user put %q in its comment: %q", id, note, got)
			}
			if r := run(ctxFor(t, time.Minute), c.cmd(j.user, "scontrol", "release", id)); r.code != 0 {
				t.Fatalf("scontrol release %s: %s", id, r)
			}
		}
	}
	if err := waitFor(5*time.Minute, func() error {
		out, err := c.cmd(nil, "squeue", "-h", "-o", "%i %T").Output()
		if err != nil {
			return err
		}
		if q := strings.TrimSpace(string(out)); q != "" {
			return fmt.Errorf("jobs still queued:\n%s", q)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Each job did what its kind promises, and its Epilog ran on each of
	// its nodes (the Epilog's log ends once the program has returned).
	kinds := map[string]int{}
	var epilogs []string
	for _, j := range jobs {
		files, _ := filepath.Glob(filepath.Join(j.user.dir, j.name+"-*-*.out"))
		if want := max(1, j.array) * max(1, j.nodes); len(files) != want {
			t.Errorf("%s: %d task outputs %v, want %d", j.name, len(files), files, want)
		}
		for _, f := range files {
			text := readFile(t, f)
			e := find(events(text), "job")
			if e == nil {
				t.Errorf("%s: no job line:\n%s", f, text)
				continue
			}
			id, node := e["id"], e["node"]
			epilogs = append(epilogs, c.path("log", "epilog-"+id+"-"+node+".log"))
			a := parseApp(t, text)
			if j.quota == 0 {
				gpus, err := c.nodeByName(node).gpus()
				if err != nil {
					t.Fatal(err)
				}
				if e["session"] != "none" || a.total != gpus[0].PhysicalBytes || a.allowed != 2 {
					t.Errorf("%s: job %s on %s: session %s, total %d, allowed %d; want whole GPUs: no session, the GPU's %d bytes",
						j.name, id, node, e["session"], a.total, a.allowed, gpus[0].PhysicalBytes)
				}
				continue
			}
			if e["session"] != id || a.total != j.quota || a.allowed != 4 || a.denied != 1 {
				t.Errorf("%s: job %s on %s: session %s, total %d, allowed %d, denied %d; want its session and its %d-byte quota, filled, then refused",
					j.name, id, node, e["session"], a.total, a.allowed, a.denied, j.quota)
			}
		}
		got := c.jobComment(t, ids[j.name])
		if j.comment != "" && got != j.comment {
			t.Errorf("%s: job %s's comment %q, want %q", j.name, ids[j.name], got, j.comment)
		}
		if j.comment == "" && strings.Contains(got, note) {
			t.Errorf("%s: job %s's comment %q: a share job has the note for whole GPUs", j.name, ids[j.name], got)
		}
		kinds[j.name] = len(files)
	}
	if err := waitFor(time.Minute, func() error {
		for _, p := range epilogs {
			if b, err := os.ReadFile(p); err != nil || !strings.Contains(string(b), "rc=") {
				return fmt.Errorf("the Epilog has not finished: %s", p)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	runs, err := closeWatch()
	if err != nil {
		t.Fatalf("the watcher failed: %v", err)
	}
	byParent := map[string]int{}
	var bad []string
	seenSuite := 0
	for _, r := range runs {
		if r.under("slurm.test") {
			seenSuite++ // this suite's own (its environment is the command's alone)
		}
		if !r.Mine {
			continue // another suite's cluster on this machine
		}
		byParent[filepath.Base(r.Prog)+" from "+r.parent()]++
		if r.under("gpuslice-prolog", "gpuslice-epilog", "prolog.sh", "epilog.sh") {
			bad = append(bad, filepath.Base(r.Prog)+" (ancestry: "+strings.Join(r.Chain, " < ")+")")
		}
	}
	var lines []string
	for k, n := range byParent {
		lines = append(lines, fmt.Sprintf("%4d %s", n, k))
	}
	sort.Strings(lines)
	t.Logf("task outputs by job: %v", kinds)
	t.Logf("Slurm commands started while the queue ran, by program and parent:\n%s", strings.Join(lines, "\n"))
	if seenSuite == 0 {
		t.Fatal("the watcher saw none of the suite's own squeue and scontrol runs: it sees nothing")
	}
	if len(bad) > 0 {
		t.Errorf("%d Slurm commands run under a Prolog or an Epilog:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if bad, err := c.drained(); err != nil || len(bad) > 0 {
		t.Errorf("drained nodes %v (%v)", bad, err)
	}
}

// jobComment is job id's comment as Slurm shows it (spaces kept, which
// scontrol's one-line form does not keep apart from its fields); the
// first task's for an array.
func (c *cluster) jobComment(t *testing.T, id string) string {
	t.Helper()
	out, err := c.cmd(nil, "squeue", "-h", "-t", "all", "-j", id, "-o", "%k").Output()
	if err != nil {
		t.Fatalf("squeue -j %s -o %%k: %v", id, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if line == "(null)" {
		return ""
	}
	return line
}
