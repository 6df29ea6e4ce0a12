package slurm

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// Inside the job its user reads the job's quota and peak without root
// (gpuslice status). The node's gpusliced records the job's quota and peak
// GPU memory in Slurm's accounting once the job has ended (the Epilog
// hands it the figures), and AllocTRES holds its ask (gres/shard, MiB):
// `sacct -o JobID,AdminComment` shows them, from the real
// slurmdbd and MariaDB, to root and to the job's user; the user cannot
// write the field.
func TestSacctShowsPeak(t *testing.T) {
	c := needCluster(t)
	if c.acct == nil {
		t.Skip("Slurm accounting is off (GPUSLICE_SLURM_ACCOUNTING=0)")
	}
	u := c.users["gsltest1"]
	// 3 x 300 MiB fit the 1 GiB quota, the fourth is denied: peak 900 MiB.
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=1G
#SBATCH --output=%[1]s/acct-%%j.out
srun %[2]s --step 300M --count 4
# the job's user, inside the job, without root: quota and peak
%[3]s status --json > %[1]s/acct-status-$SLURM_JOB_ID.json
`, u.dir, c.bin("target_app"), c.bin("gpuslice"))
	id := c.sbatch(t, u, "acct", script)
	j := c.waitJobEnd(t, id, 3*time.Minute)
	if j["JobState"] != "COMPLETED" {
		t.Fatalf("job %s: %v\n%s", id, j, readFile(t, filepath.Join(u.dir, "acct-"+id+".out")))
	}
	c.assertReleased(t, id)

	// gpuslice status inside the job, as the job's user (IPC VIEW).
	var st client.JobStatus
	raw := readFile(t, filepath.Join(u.dir, "acct-status-"+id+".json"))
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.ID != id || st.UID != u.uid || len(st.GPUs) != 1 ||
		st.GPUs[0].LimitBytes != 1<<30 || st.GPUs[0].PeakBytes != 900<<20 || st.GPUs[0].Denied != 1 {
		t.Fatalf("gpuslice status inside job %s: %v\n%s", id, err, raw)
	}

	want := c.wantComment(t, id, 1024)
	if !strings.HasPrefix(want, "gpuslice:v2;quota_mib=1024;nodes=1;reported=0;peak_mib=900;peak_on="+c.jobNode(t, id).Name+"/gpu-") ||
		!strings.HasSuffix(want, ";denied=1") {
		t.Fatalf("gpusliced's report of job %s: %s (%+v)", id, want, c.history(t, id))
	}

	var got string
	err := waitFor(figuresBound, func() error {
		out, err := c.sacct(id, "JobID,AdminComment")
		got = strings.TrimSpace(out)
		if err != nil {
			return fmt.Errorf("sacct: %v: %s", err, out)
		}
		if got != id+"|"+want {
			return fmt.Errorf("sacct -j %s -o JobID,AdminComment = %q, want %q", id, got, id+"|"+want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nslurmdbd log:\n%s", err, tail(readFile(t, c.path("log", "slurmdbd.log")), 20))
	}

	// The ask, in Slurm's own terms: 1024 shards of one GPU (MiB).
	c.sacctField(t, id, "AllocTRES", containsAll("gres/shard=1024"))

	t.Run("the job's user reads it", func(t *testing.T) {
		out, err := c.cmd(u, "sacct", "-X", "-n", "-P", "-j", id, "-o", "JobID,AdminComment").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != id+"|"+want {
			t.Fatalf("sacct as %s: %v: %q", u.name, err, out)
		}
	})
	t.Run("the job's user cannot write it", func(t *testing.T) {
		out, _ := c.cmd(u, "sacctmgr", "-i", "modify", "job", "where", "jobid="+id, "set", "AdminComment=gpuslice:forged").CombinedOutput()
		// 26.05's sacctmgr prints "Modified jobs..." after the refusal too.
		if strings.Contains(string(out), "Modified jobs") && !strings.Contains(string(out), "permission denied") {
			t.Fatalf("sacctmgr modify job as %s: %s", u.name, out)
		}
		if got, _ := c.sacct(id, "AdminComment"); strings.TrimSpace(got) != want {
			t.Fatalf("AdminComment changed to %q", got)
		}
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// On a cluster without slurmdbd, gpusliced learns from slurm.conf that
// there is no accounting and keeps nothing for it; the Epilog, installed
// as the docs say (no flag), says so and returns at once. (Every release's
// cluster has slurmdbd; make test-slurm runs this test once more with
// GPUSLICE_SLURM_ACCOUNTING=0, on a cluster without it.)
func TestEpilogWithoutAccountingReturnsAtOnce(t *testing.T) {
	c := needCluster(t)
	if c.acct != nil {
		t.Skip("this cluster has Slurm accounting (TestSacctShowsPeak covers it)")
	}
	u := c.users["gsltest1"]
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=256M",
		c.bin("target_app"), "--step", "64M", "--count", "2"))
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	id := jobID(t, r)
	c.waitJobEnd(t, id, 2*time.Minute)
	c.assertReleased(t, id)
	for _, n := range c.jobNodes(t, id) {
		log := readFile(t, c.path("log", "epilog-"+id+"-"+n.Name+".log"))
		if !strings.Contains(log, "job "+id+": figures not recorded in Slurm's accounting:") || !strings.Contains(log, "Slurm has no slurmdbd") {
			t.Errorf("the Epilog of job %s on %s did not say that there is no accounting:\n%s", id, n.Name, log)
		}
		if m := regexp.MustCompile(`ran_ns=(\d+) rc=0`).FindStringSubmatch(log); m != nil {
			ns, _ := strconv.ParseInt(m[1], 10, 64)
			t.Logf("the Epilog of job %s on %s ran for %.3f s", id, n.Name, float64(ns)/1e9)
		} else {
			t.Errorf("the Epilog of job %s on %s did not exit 0:\n%s", id, n.Name, log)
		}
	}
}
