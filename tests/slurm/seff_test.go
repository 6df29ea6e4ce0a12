package slurm

// gpuslice seff (docs/user-guide.md): a finished job's GPU memory
// efficiency from Slurm's accounting, run by the job's user on the submit
// host (no gpusliced there): what the nodes' gpusliced recorded (the job's
// summary: quota, highest peak and where, nodes reported), for one job, a
// job on two nodes and an array job. Real slurmdbd and MariaDB.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

type seffOut struct {
	Jobs []struct {
		JobID string `json:"job_id"`
		User  string `json:"user"`
		GPUs  []struct {
			Node          string `json:"node"`
			UUID          string `json:"uuid"`
			QuotaBytes    uint64 `json:"quota_bytes"`
			PeakBytes     uint64 `json:"peak_bytes"`
			EfficiencyPct int    `json:"efficiency_pct"`
			Refused       uint64 `json:"refused"`
		} `json:"gpus"`
		PeakBytes     uint64 `json:"peak_bytes"`
		QuotaBytes    uint64 `json:"quota_bytes"`
		EfficiencyPct int    `json:"efficiency_pct"`
		Refused       uint64 `json:"refused"`
		Advice        string `json:"advice"`
		Ask           string `json:"ask"`
		PeakOn        string `json:"peak_on"`
		NodesReported int    `json:"nodes_reported"`
		NodesTotal    int    `json:"nodes_total"`
	} `json:"jobs"`
	Summary struct {
		PeakBytes     uint64 `json:"peak_bytes"`
		EfficiencyPct int    `json:"efficiency_pct"`
		Advice        string `json:"advice"`
		Ask           string `json:"ask"`
	} `json:"summary"`
}

// seffOf runs gpuslice seff --json as u on the submit host until jobs
// jobs are u's and have their figures from each of their nodes (nodes),
// and ready (when not nil) agrees, and returns it with the human output.
// slurmdbd takes a moment to hold a job's final record: right after
// gpusliced's write sacct may name root as the user, or an array's task by
// the array's first index.
func (c *cluster) seffOf(t *testing.T, u *testUser, id string, jobs, nodes int, ready func(seffOut) error) (seffOut, string) {
	t.Helper()
	var got seffOut
	err := waitFor(figuresBound, func() error {
		out, err := c.cmd(u, c.bin("gpuslice"), "seff", "--json", id).CombinedOutput()
		if err != nil {
			return fmt.Errorf("gpuslice seff --json %s: %v: %s", id, err, out)
		}
		got = seffOut{}
		if err := json.Unmarshal(out, &got); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if len(got.Jobs) != jobs {
			return fmt.Errorf("%d jobs with figures, want %d: %s", len(got.Jobs), jobs, out)
		}
		for _, j := range got.Jobs {
			if j.NodesReported != nodes || j.NodesTotal != nodes || j.User != u.name {
				return fmt.Errorf("job %s of %s: figures of %d of %d nodes, want %d of %s: %s", j.JobID, j.User, j.NodesReported,
					j.NodesTotal, nodes, u.name, out)
			}
		}
		if ready != nil {
			return ready(got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nslurmdbd log:\n%s", err, tail(readFile(t, c.path("log", "slurmdbd.log")), 20))
	}
	human, err := c.cmd(u, c.bin("gpuslice"), "seff", id).CombinedOutput()
	if err != nil {
		t.Fatalf("gpuslice seff %s: %v: %s", id, err, human)
	}
	return got, string(human)
}

func TestSeff(t *testing.T) {
	c := needCluster(t)
	if c.acct == nil {
		t.Skip("Slurm accounting is off (GPUSLICE_SLURM_ACCOUNTING=0)")
	}
	u := c.users["gsltest1"]
	app := c.bin("target_app")
	t.Run("one job at its quota", func(t *testing.T) {
		// 3 x 300 MiB fit 1 GiB, the fourth is refused: peak 900 MiB
		r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=1G", app, "--step", "300M", "--count", "4"))
		if r.code != 0 {
			t.Fatalf("srun: %s", r)
		}
		id := jobID(t, r)
		c.waitJobEnd(t, id, 2*time.Minute)
		node := c.jobNode(t, id).Name
		got, human := c.seffOf(t, u, id, 1, 1, nil)
		j := got.Jobs[0]
		if j.JobID != id || j.User != u.name || !strings.HasPrefix(j.PeakOn, "GPU-") || !strings.HasSuffix(j.PeakOn, " on "+node) ||
			j.QuotaBytes != GiB || j.PeakBytes != 900*MiB || j.EfficiencyPct != 88 || j.Refused != 1 ||
			j.Advice != "more" || j.Ask != "1536M" {
			t.Errorf("seff %s: %+v", id, got)
		}
		for _, w := range []string{"Job ID: " + id + "\n", "GPU memory asked: 1GiB per GPU (--gpu-mem)\n",
			"GPU memory peak: 900MiB (" + j.PeakOn + ")\n", "GPU memory efficiency: 88% of 1GiB\n", "Allocations refused: 1\n",
			"Nodes with figures: 1 of 1\n",
			"Next time: ask for more, e.g. --gpu-mem=1536M (the quota was reached)\n"} {
			if !strings.Contains(human, w) {
				t.Errorf("gpuslice seff %s lacks %q:\n%s", id, w, human)
			}
		}
	})
	t.Run("a job on two nodes", func(t *testing.T) {
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH -N2 --gpu-mem=2G\n#SBATCH --output=%s/seff2-%%j.out\nsrun %s --step 256M --count 1\n",
			u.dir, app)
		id := c.sbatch(t, u, "seff2", script)
		if j := c.waitJobEnd(t, id, 3*time.Minute); j["JobState"] != "COMPLETED" {
			t.Fatalf("job %s: %v\n%s", id, j, readFile(t, filepath.Join(u.dir, "seff2-"+id+".out")))
		}
		var want []string
		for _, n := range c.jobNodes(t, id) {
			want = append(want, n.Name)
		}
		got, human := c.seffOf(t, u, id, 1, 2, nil)
		// both nodes peaked at 256 MiB: the summary names the first in
		// name order
		sort.Strings(want)
		if j := got.Jobs[0]; j.QuotaBytes != 2*GiB || j.PeakBytes != 256*MiB || j.EfficiencyPct != 13 || j.Refused != 0 ||
			!strings.HasSuffix(j.PeakOn, " on "+want[0]) || j.Advice != "lower" || j.Ask != "512M" {
			t.Errorf("seff %s (job ran on %v): %+v", id, want, got)
		}
		if !strings.Contains(human, "GPU memory peak: 256MiB (GPU-") || !strings.Contains(human, "Nodes with figures: 2 of 2\n") ||
			!strings.Contains(human, "Next time: --gpu-mem=512M would do (the peak plus a margin)\n") {
			t.Errorf("gpuslice seff %s:\n%s", id, human)
		}
	})
	t.Run("an array job", func(t *testing.T) {
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=4G --array=1-3\n#SBATCH --output=%s/seffa-%%A_%%a.out\n"+
			"%s --step $((SLURM_ARRAY_TASK_ID * 512))M --count 1\n", u.dir, app)
		id := c.sbatch(t, u, "seffa", script)
		var ids []string
		err := waitFor(3*time.Minute, func() error {
			out, err := c.cmd(nil, "squeue", "-h", "-j", id).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				return fmt.Errorf("array %s still queued: %v %s", id, err, out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// task i allocated i x 512 MiB
		tasks := func(got seffOut) error {
			for i, j := range got.Jobs {
				if want := uint64(i+1) * 512 * MiB; j.JobID != fmt.Sprintf("%s_%d", id, i+1) || j.PeakBytes != want {
					return fmt.Errorf("task %s: peak %d, want %s_%d: %d", j.JobID, j.PeakBytes, id, i+1, want)
				}
			}
			return nil
		}
		got, human := c.seffOf(t, u, id, 3, 1, tasks)
		for i, j := range got.Jobs {
			ids = append(ids, j.JobID)
			if want := uint64(i+1) * 512 * MiB; j.PeakBytes != want || j.QuotaBytes != 4*GiB {
				t.Errorf("task %s: peak %d, want %d", j.JobID, j.PeakBytes, want)
			}
		}
		if strings.Join(ids, ",") != fmt.Sprintf("%[1]s_1,%[1]s_2,%[1]s_3", id) {
			t.Errorf("array %s: tasks %v", id, ids)
		}
		// the largest task decides what every task should ask
		if s := got.Summary; s.PeakBytes != 1536*MiB || s.EfficiencyPct != 38 || s.Advice != "lower" || s.Ask != "2G" {
			t.Errorf("array %s summary: %+v", id, s)
		}
		if !strings.Contains(human, "Job ID: "+id+" (3 jobs with GPU memory figures)\n") ||
			!strings.Contains(human, "Next time: --gpu-mem=2G would do for every one of these jobs (the peak plus a margin)\n") {
			t.Errorf("gpuslice seff %s:\n%s", id, human)
		}
		t.Run("one task", func(t *testing.T) {
			got, _ := c.seffOf(t, u, id+"_2", 1, 1, nil)
			if got.Jobs[0].JobID != id+"_2" || got.Jobs[0].PeakBytes != 1024*MiB {
				t.Errorf("seff %s_2: %+v", id, got)
			}
		})
	})
}
