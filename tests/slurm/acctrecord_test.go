package slurm

// gpusliced records each ended job's figures in Slurm's accounting out of
// the job's path (daemon/acctrecord): through a slurmdbd outage and a
// kill -9 of gpusliced, and for a job of 256 nodes whose records all
// reach one slurmdbd at once. Real slurmdbd and MariaDB.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/acctrecord"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/admincomment"
	"github.com/gpuslice/gpuslice/internal/api"
)

// wantComment is the AdminComment the nodes of job id record: each node's
// release report (gpusliced's history), or its refusal of the quota
// (quotaMiB per GPU), placed by its index in the job's node list.
func (c *cluster) wantComment(t *testing.T, id string, quotaMiB uint64, refused ...string) string {
	t.Helper()
	nodes := c.jobNodes(t, id)
	var s admincomment.Summary
	for i, n := range nodes {
		nd := admincomment.Node{Name: n.Name, Index: i, Nodes: len(nodes), QuotaMiB: quotaMiB}
		if slices.Contains(refused, n.Name) {
			nd.Refused = true
		} else {
			for _, g := range n.history(t, id).GPUs {
				nd.GPUs = append(nd.GPUs, admincomment.GPU{UUID: g.UUID, QuotaMiB: admincomment.MiB(g.LimitBytes),
					PeakMiB: admincomment.MiB(g.PeakBytes), Denied: g.Denied})
			}
		}
		s.Add(nd)
	}
	return s.String()
}

// metric reads one of the node's gpusliced metrics (a series without
// labels) from its admin socket.
func (n *node) metric(t *testing.T, name string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.admSock)
		}}}
	resp, err := hc.Get("http://gpusliced/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", n.Name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s %s: %q", n.Name, name, v)
			}
			return f
		}
	}
	t.Fatalf("%s: no metric %s", n.Name, name)
	return 0
}

// startSlurmdbd starts slurmdbd again and waits until it answers.
func (c *cluster) startSlurmdbd() error {
	if err := c.start("slurmdbd", exec.Command("slurmdbd", "-D")); err != nil {
		return err
	}
	return waitFor(60*time.Second, func() error {
		out, err := c.cmd(nil, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").CombinedOutput()
		if err != nil {
			return fmt.Errorf("sacctmgr show cluster: %v: %s", err, out)
		}
		return nil
	})
}

// slurmdbd is stopped, 20 quota jobs end, gpusliced is killed -9 and
// started again on one node, slurmdbd comes back: every job has its
// figures in sacct within 2 minutes, and the node whose gpusliced kept
// running wrote each of its jobs' comment once.
func TestAccountingThroughOutage(t *testing.T) {
	c := needAccounting(t)
	u := c.users["gsltest1"]
	tn1, tn2 := c.nodeByName("tn1"), c.nodeByName("tn2")
	queued := func() float64 {
		return tn1.metric(t, "gpuslice_accounting_queue_records") + tn2.metric(t, "gpuslice_accounting_queue_records")
	}
	emptyQueues := func() error {
		if q := queued(); q != 0 {
			return fmt.Errorf("%v records still queued", q)
		}
		return nil
	}
	// The records of earlier tests' jobs confirmed first.
	if err := waitFor(3*time.Minute, emptyQueues); err != nil {
		t.Fatal(err)
	}
	writes2 := tn2.metric(t, "gpuslice_accounting_writes_total")
	c.kill("slurmdbd", syscall.SIGTERM, 10*time.Second)
	t.Cleanup(func() {
		if !c.running("slurmdbd") {
			if err := c.startSlurmdbd(); err != nil {
				t.Errorf("slurmdbd: %v", err)
			}
		}
	})
	const jobs = 20
	var ids []string
	for i := 0; i < jobs; i++ {
		// 2 x 64 MiB: peak 128 MiB; half the jobs on each node
		script := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=256M\n#SBATCH --nodelist=tn%d\n#SBATCH --output=%s/outage-%%j.out\nexec %s --step 64M --count 2\n",
			1+i%2, u.dir, c.bin("target_app"))
		ids = append(ids, c.sbatch(t, u, fmt.Sprintf("outage%d", i), script))
	}
	onTn2 := 0
	for _, id := range ids {
		if j := c.waitJobEnd(t, id, 3*time.Minute); j["JobState"] != "COMPLETED" {
			t.Fatalf("job %s: %v\n%s", id, j, readFile(t, filepath.Join(u.dir, "outage-"+id+".out")))
		}
		if c.jobNode(t, id) == tn2 {
			onTn2++
		}
	}
	// Every job's record waits on its node.
	err := waitFor(30*time.Second, func() error {
		if q := queued(); q != jobs {
			return fmt.Errorf("%v records queued, want %d", q, jobs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.kill("gpusliced-tn1", syscall.SIGKILL, 10*time.Second)
	if err := tn1.restartGpusliced(); err != nil {
		t.Fatal(err)
	}
	if err := c.startSlurmdbd(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	missing := map[string]bool{}
	err = waitFor(2*time.Minute, func() error {
		for _, id := range ids {
			out, err := c.sacct(id, "AdminComment")
			if err != nil {
				return fmt.Errorf("sacct: %v: %s", err, out)
			}
			missing[id] = !strings.HasPrefix(strings.TrimSpace(out), "gpuslice:v2;quota_mib=256;nodes=1;reported=0;peak_mib=128;")
		}
		var left []string
		for _, id := range ids {
			if missing[id] {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("jobs without their figures in sacct: %v", left)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v (slurmdbd back %v ago)\ngpusliced on tn1:\n%s", err, time.Since(back).Round(time.Second),
			tail(readFile(t, c.path("log", "gpusliced-tn1.out")), 30))
	}
	t.Logf("all %d jobs had their figures in sacct %v after slurmdbd was back (%d had run on tn2)", jobs,
		time.Since(back).Round(100*time.Millisecond), onTn2)
	for _, id := range ids {
		if got := strings.TrimSpace(must(c.sacct(id, "AdminComment"))); got != c.wantComment(t, id, 256) {
			t.Errorf("job %s: AdminComment %q, want %q", id, got, c.wantComment(t, id, 256))
		}
	}
	// Each record leaves its queue once a read after its write (two
	// command timeouts and 5 s later) has confirmed it.
	if err := waitFor(3*time.Minute, emptyQueues); err != nil {
		t.Error(err)
	}
	if onTn2 != jobs/2 {
		t.Errorf("%d of the %d jobs ran on tn2, want half", onTn2, jobs)
	}
	if w := tn2.metric(t, "gpuslice_accounting_writes_total") - writes2; int(w) != onTn2 {
		t.Errorf("tn2's gpusliced ran sacctmgr %v times for its %d jobs, want once each", w, onTn2)
	}
}

func must(s string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return s
}

// A job on 256 nodes, simulated: one real job in slurmdbd, and 256
// recorders (each its own node of the job's list and its own queue, as
// 256 nodes' gpusliced) that write at once. Every node is counted, the
// highest peak is the right one, the comment stays within 1 KiB.
func TestAccounting256Nodes(t *testing.T) {
	c := needAccounting(t)
	u := c.users["gsltest2"]
	// A job without a quota: its own nodes record nothing in its comment.
	script := fmt.Sprintf("#!/bin/sh\n#SBATCH --output=%s/n256-%%j.out\ntrue\n", u.dir)
	id := c.sbatch(t, u, "n256", script)
	if j := c.waitJobEnd(t, id, 2*time.Minute); j["JobState"] != "COMPLETED" {
		t.Fatalf("job %s: %v", id, j)
	}
	c.sacctField(t, id, "JobIDRaw", func(v string) error {
		if v != id {
			return fmt.Errorf("slurmdbd has no job %s yet", id)
		}
		return nil
	})
	sacct, err1 := exec.LookPath("sacct")
	sacctmgr, err2 := exec.LookPath("sacctmgr")
	if err1 != nil || err2 != nil {
		t.Fatalf("Slurm's programs: %v %v", err1, err2)
	}
	const n = 256
	const peakAt = 173 // gn174 holds the highest peak
	start := time.Now()
	var sent, writes, failed atomic.Int64
	// each node's writes and confirmation, for the report of a node lost
	var histMu sync.Mutex
	hist := make([][]string, n)
	note := func(i int, what string) {
		histMu.Lock()
		defer histMu.Unlock()
		hist[i] = append(hist[i], fmt.Sprintf("%s %v", what, time.Since(start).Round(10*time.Millisecond)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := 0; i < n; i++ {
		st, err := store.Open(filepath.Join(t.TempDir(), "gpusliced.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r, err := acctrecord.New(st, acctrecord.Options{
			Slurm: acctrecord.Slurm{Sacct: sacct, Sacctmgr: sacctmgr, Conf: c.conf},
			Events: acctrecord.Events{Sent: func() { sent.Add(1); note(i, "confirmed") }, Write: func() { writes.Add(1); note(i, "wrote") },
				Failed: func() { failed.Add(1); note(i, "failed") }},
			Seed: int64(i + 1),
		})
		if err != nil {
			t.Fatal(err)
		}
		peak := uint64(1000 + i)
		if i == peakAt {
			peak = 7000
		}
		rec := store.AcctRecord{JobID: id, Node: fmt.Sprintf("gn%03d", i+1), NodeList: "gn[001-256]", QuotaBytes: 8 << 30,
			Ended: time.Now(), GPUs: []api.ReportGPU{
				{UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-000000000000", i), LimitBytes: 8 << 30, PeakBytes: peak << 20, Denied: 1},
				{UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-000000000001", i), LimitBytes: 8 << 30, PeakBytes: 10 << 20}}}
		if out, err := r.Add(rec); err != nil || !out.Queued {
			t.Fatalf("node %d: %+v, %v", i, out, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(ctx) }()
	}
	err := waitFor(10*time.Minute, func() error {
		if s := sent.Load(); s != n {
			return fmt.Errorf("%d of %d nodes' records sent (%d writes, %d failed sends)", s, n, writes.Load(), failed.Load())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	got := strings.TrimSpace(must(c.sacct(id, "AdminComment")))
	s, kind, err := admincomment.Parse(got)
	if err != nil || kind != admincomment.Current {
		t.Fatalf("AdminComment %q: %v", got, err)
	}
	if s.Nodes != n || s.Reported.Len() != n || s.Refused.Len() != 0 || s.Denied != n || s.PeakMiB != 7000 ||
		s.PeakOn != fmt.Sprintf("gn174/gpu-%08x-0000-4000-8000-000000000000", peakAt) || s.QuotaMiB != 8192 {
		t.Errorf("AdminComment %q: want 256 nodes reported, 256 denied, peak 7000 MiB on gn174's first GPU", got)
	}
	for i := 0; i < n; i++ {
		if !s.Reported.Has(i) {
			histMu.Lock()
			t.Errorf("gn%03d not in the comment; it %v", i+1, hist[i])
			histMu.Unlock()
		}
	}
	if len(got) > 1024 {
		t.Errorf("AdminComment of %d bytes, want at most 1 KiB", len(got))
	}
	t.Logf("256 nodes' records in slurmdbd after %v: %d sacctmgr writes (%d rewritten after a concurrent write), %d failed sends; comment %d bytes: %s",
		took.Round(100*time.Millisecond), writes.Load(), writes.Load()-n, failed.Load(), len(got), got)
}
