package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// gpusliced down when a job starts (docs/flow.md, "Failures and what they do"):
//   - back within the Prolog's retry window: the job runs normally;
//   - down for longer: an unhealthy node, by Slurm's convention: the
//     Prolog fails with the reason in slurmd's log, the node is drained
//     and the batch job requeued held; once the admin
//     restarts the daemon, resumes the node and releases the job, it runs
//     with its quota.
func TestDaemonDownAtJobStart(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	n := c.nodes[0]
	t.Cleanup(func() {
		if !c.running("gpusliced-" + n.Name) {
			if err := n.restartGpusliced(); err != nil {
				t.Errorf("restart gpusliced: %v", err)
			}
		}
		_ = c.cmd(nil, "scontrol", "update", "nodename="+n.Name, "state=resume").Run()
	})

	t.Run("restarted within the retry window", func(t *testing.T) {
		c.kill("gpusliced-"+n.Name, syscall.SIGKILL, 10*time.Second)
		cmd := c.cmd(u, "srun", "-v", "-w", n.Name, "--gpu-mem=2G", c.bin("target_app"), "--step", "1G", "--count", "3")
		done := make(chan result, 1)
		go func() { done <- run(context.Background(), cmd) }()
		// The job is allocated: its Prolog runs (CONFIGURING), retrying.
		if err := waitFor(60*time.Second, func() error {
			out, _ := c.cmd(nil, "squeue", "-h", "-u", u.name, "-o", "%T").Output()
			if st := strings.TrimSpace(string(out)); st == "" || st == "PENDING" {
				return fmt.Errorf("job not allocated yet (%q)", st)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := n.restartGpusliced(); err != nil {
			t.Fatal(err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(2 * time.Minute):
			t.Fatal("srun did not finish")
		}
		if r.code != 0 {
			t.Fatalf("srun across a daemon restart: %s", r)
		}
		app := parseApp(t, r.stdout)
		if app.total != 2*GiB || app.allowed != 2 || app.denied != 1 {
			t.Fatalf("quota after the restart: total %d allowed %d denied %d", app.total, app.allowed, app.denied)
		}
		c.assertReleased(t, jobID(t, r))
	})

	t.Run("down for longer: node drained, job held, recovered by the admin", func(t *testing.T) {
		c.kill("gpusliced-"+n.Name, syscall.SIGKILL, 10*time.Second)
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=1G\n#SBATCH --output=%s/down-%%j.out\n%s --step 1G --count 2\n",
			u.dir, c.bin("target_app"))
		id := c.sbatch(t, u, "down", script, "-w", n.Name)
		if err := waitFor(2*time.Minute, func() error {
			j, err := c.job(id)
			if err != nil {
				return err
			}
			if j["JobState"] != "PENDING" || !strings.Contains(j["Reason"], "held") {
				return fmt.Errorf("job %s: %s (%s)", id, j["JobState"], j["Reason"])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if st, _ := c.nodeState(n.Name); st != "drained" {
			t.Errorf("node %s is %q after the Prolog failed, want drained", n.Name, st)
		}
		node, _ := c.cmd(nil, "scontrol", "-o", "show", "node", n.Name).Output()
		if !strings.Contains(string(node), "Reason=Prolog error") {
			t.Errorf("node reason: %s", node)
		}
		slurmd := readFile(t, c.path("log", "slurmd-"+n.Name+".log"))
		want := "gpuslice-prolog: job " + id + ": cannot set up the GPU memory quota of 1GiB per GPU"
		if !strings.Contains(slurmd, want) {
			t.Errorf("slurmd's log does not give the Prolog's reason %q", want)
		}
		if _, err := os.Stat(filepath.Join(u.dir, "down-"+id+".out")); err == nil {
			t.Errorf("the job ran without its quota")
		}

		if err := n.restartGpusliced(); err != nil {
			t.Fatal(err)
		}
		if out, err := c.cmd(nil, "scontrol", "update", "nodename="+n.Name, "state=resume").CombinedOutput(); err != nil {
			t.Fatalf("resume: %v: %s", err, out)
		}
		if out, err := c.cmd(nil, "scontrol", "release", id).CombinedOutput(); err != nil {
			t.Fatalf("release %s: %v: %s", id, err, out)
		}
		// A requeued job may not start before its BeginTime (Slurm delays
		// requeued batch jobs); the admin can let it start now. The update
		// failed once on 24.11 while all the suites ran ("Unexpected message
		// received for job N"): a job that started at its release needs no
		// update, and one still pending is asked again.
		for try := 1; ; try++ {
			out, err := c.cmd(nil, "scontrol", "update", "jobid="+id, "starttime=now").CombinedOutput()
			if err == nil {
				break
			}
			st, _ := c.cmd(nil, "squeue", "-h", "-j", id, "-o", "%T").Output()
			if state := strings.TrimSpace(string(st)); state != "PENDING" {
				break
			} else if try == 3 {
				t.Fatalf("update %s starttime=now: %v: %s (job %s)", id, err, out, state)
			}
			time.Sleep(time.Second)
		}
		j := c.waitJobEnd(t, id, 2*time.Minute)
		if j["JobState"] != "COMPLETED" {
			t.Fatalf("job %s after recovery: %s", id, j["JobState"])
		}
		app := parseApp(t, readFile(t, filepath.Join(u.dir, "down-"+id+".out")))
		if app.total != 1*GiB || app.allowed != 1 || app.denied != 1 {
			t.Fatalf("quota after recovery: total %d allowed %d denied %d", app.total, app.allowed, app.denied)
		}
		c.assertReleased(t, id)
	})
}

// gpusliced down when a job ends: the Epilog gives up after its retries
// and exits 0, so the node is not drained; the session survives in the
// daemon's database for its TTL reaper.
func TestDaemonDownAtJobEnd(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	n := c.nodes[1]
	t.Cleanup(func() {
		if !c.running("gpusliced-" + n.Name) {
			_ = n.restartGpusliced()
		}
		_ = c.cmd(nil, "scontrol", "update", "nodename="+n.Name, "state=resume").Run()
	})
	marker := filepath.Join(u.dir, "end-go")
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=1G\n#SBATCH --output=%s/end-%%j.out\nwhile [ ! -e %s ]; do sleep 0.1; done\n",
		u.dir, marker)
	id := c.sbatch(t, u, "end", script, "-w", n.Name)
	c.waitSession(t, id, 0, 0, 90*time.Second)
	if err := waitFor(time.Minute, func() error {
		j, err := c.job(id)
		if err != nil || j["JobState"] != "RUNNING" {
			return fmt.Errorf("job %s not running: %v %v", id, j["JobState"], err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.kill("gpusliced-"+n.Name, syscall.SIGKILL, 10*time.Second)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := c.waitJobEnd(t, id, 2*time.Minute)
	if j["JobState"] != "COMPLETED" {
		t.Errorf("job %s: %s", id, j["JobState"])
	}
	if err := c.waitNodeState("idle", 30*time.Second); err != nil {
		t.Fatalf("node after an Epilog without daemon: %v", err)
	}
	if err := n.restartGpusliced(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.session(id); err != nil {
		t.Fatalf("session %s after the restart: %v (it should wait for the TTL reaper)", id, err)
	}
	// What the reaper would do, done by hand to leave the node clean.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := n.client()
	defer cl.Close()
	if _, err := cl.DeleteSession(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	c.assertReleased(t, id)
}
