package prolog

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/hostlist"
)

func TestNodeEntries(t *testing.T) {
	r := &client.Report{GPUs: []client.ReportGPU{
		{UUID: "GPU-A1", LimitBytes: 8 << 30, PeakBytes: 5<<30 + 1, Denied: 2},
		{UUID: "GPU-b", LimitBytes: 1 << 30, PeakBytes: 0},
	}}
	want := "gpuslice:node01/gpu-a1=quota_mib:8192,peak_mib:5121,denied:2;node01/gpu-b=quota_mib:1024,peak_mib:0,denied:0"
	if got := FormatComment(NodeEntries("Node01", r)); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := RefusalEntry("gpu 7", 4<<30+1); got != "gpu_7/refused=quota_mib:4097" {
		t.Fatalf("refusal entry %q", got)
	}
}

func TestMergeComment(t *testing.T) {
	for _, c := range []struct {
		name, comment, node string
		mine, nodes         []string
		want                string
	}{
		{"empty", "", "n1", []string{"n1/gpu-a=x"}, nil, "gpuslice:n1/gpu-a=x"},
		{"another node's kept", "gpuslice:n1/gpu-a=x", "n2", []string{"n2/gpu-a=y"}, []string{"n1", "n2"},
			"gpuslice:n1/gpu-a=x;n2/gpu-a=y"},
		{"own replaced", "gpuslice:n1/gpu-a=old;n2/gpu-a=y", "n1", []string{"n1/gpu-a=new"}, []string{"n1", "n2"},
			"gpuslice:n2/gpu-a=y;n1/gpu-a=new"},
		{"a node outside the job dropped", "gpuslice:n9/gpu-a=old", "n1", []string{"n1/refused=quota_mib:1"}, []string{"n1", "n2"},
			"gpuslice:n1/refused=quota_mib:1"},
		{"an entry naming no node dropped", "gpuslice:gpu-a=quota_mib:1,peak_mib:1,denied:0", "n1", []string{"n1/gpu-a=x"}, nil,
			"gpuslice:n1/gpu-a=x"},
	} {
		if got := MergeComment(c.comment, c.node, c.mine, c.nodes); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestExpandHostlist(t *testing.T) {
	for in, want := range map[string]string{
		"tn1":             "tn1",
		"tn[1-3,5],gpu01": "tn1 tn2 tn3 tn5 gpu01",
		"n[08-10]":        "n08 n09 n10",
		"r[1-2]n[1-2]":    "r1n1 r1n2 r2n1 r2n2",
		"a-b[1-2].x,c":    "a-b1.x a-b2.x c",
		"":                "",
	} {
		got, err := hostlist.Expand(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("ExpandHostlist(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tn[1-", "tn[3-1]", "tn[a]", "tn]1", "n[0-99999999]"} {
		if got, err := hostlist.Expand(bad); err == nil {
			t.Errorf("ExpandHostlist(%q) = %q, want an error", bad, got)
		}
	}
}

func TestOurs(t *testing.T) {
	for existing, want := range map[string]bool{
		"": true, "(null)": true, "gpuslice:gpu-a=quota_mib:1,peak_mib:1,denied:0": true,
		"gpuslice:n1/gpu-a=quota_mib:1,peak_mib:1,denied:0;n2/refused=quota_mib:1": true,
		"JS1:abc": false, "gpuslice:x JS1:abc": false, "gpuslice:'x'": false,
	} {
		if got := ours(existing); got != want {
			t.Errorf("ours(%q) = %v, want %v", existing, got, want)
		}
	}
}

// fakeSlurm answers sacct and sacctmgr like slurmdbd would, for any
// number of nodes' Epilogs at once, with the job's record appearing after
// `after` sacct calls. clobber, when set, runs after each sacctmgr write
// (another writer).
type fakeSlurm struct {
	mu      sync.Mutex
	after   int
	sacct   int
	comment string
	calls   []string
	clobber func(f *fakeSlurm)
	// name is the job's JobID (110_3 for an array's task; "": its id).
	name string
	// siblings are the JobIDRaw|JobID|AdminComment rows of other jobs
	// sacct -j prints with the job's (an array's other tasks), whose
	// comments sacctmgr's where jobid=ID sets too.
	siblings []string
}

func (f *fakeSlurm) run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	switch name {
	case "sacct":
		f.sacct++
		rows := slices.Clone(f.siblings)
		if f.sacct > f.after {
			id := args[slices.Index(args, "-j")+1]
			rows = append([]string{id + "|" + cmp.Or(f.name, id) + "|" + f.comment}, rows...)
		}
		fields := len(strings.Split(args[slices.Index(args, "-o")+1], ","))
		for i, r := range rows { // the last fields asked for
			p := strings.Split(r, "|")
			rows[i] = strings.Join(p[len(p)-fields:], "|")
		}
		if len(rows) == 0 {
			return nil, nil
		}
		return []byte(strings.Join(rows, "\n") + "\n"), nil
	case "sacctmgr":
		if f.sacct <= f.after {
			return []byte(" Nothing modified\n"), nil
		}
		f.comment = strings.TrimPrefix(args[len(args)-1], "AdminComment=")
		if where := args[slices.Index(args, "where")+1]; f.name != "" && where == "jobid="+strings.Split(f.name, "_")[0] {
			for i, r := range f.siblings { // an array's id: every task of it
				p := strings.Split(r, "|")
				f.siblings[i] = p[0] + "|" + p[1] + "|" + f.comment
			}
		}
		if c := f.clobber; c != nil {
			f.clobber = nil
			c(f)
		}
		return []byte(" Modified jobs...\n"), nil
	}
	return nil, nil
}

func (f *fakeSlurm) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.comment
}

func TestRecord(t *testing.T) {
	r := &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-a", LimitBytes: 1 << 30, PeakBytes: 768 << 20}}}
	want := "gpuslice:n1/gpu-a=quota_mib:1024,peak_mib:768,denied:0"
	job := Job{ID: "42", Node: "n1", QuotaBytes: 1 << 30}
	t.Run("once slurmdbd has the job", func(t *testing.T) {
		f := &fakeSlurm{after: 2}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, job, r, false)
		if f.comment != want {
			t.Fatalf("AdminComment %q; calls %q; log %s", f.comment, f.calls, log.String())
		}
		if !slices.Contains(f.calls, "sacctmgr -i modify job where jobid=42 set AdminComment="+want) {
			t.Fatalf("calls %q", f.calls)
		}
	})
	t.Run("a refusal", func(t *testing.T) {
		f := &fakeSlurm{}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		a.Record(context.Background(), Config{}, job, nil, true)
		if f.comment != "gpuslice:n1/refused=quota_mib:1024" {
			t.Fatalf("AdminComment %q; calls %q", f.comment, f.calls)
		}
	})
	t.Run("leaves the site's comment alone", func(t *testing.T) {
		f := &fakeSlurm{comment: "JS1:AbC"}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, job, r, false)
		if f.comment != "JS1:AbC" || len(f.calls) != 1 || !strings.Contains(log.String(), "left alone") {
			t.Fatalf("comment %q, calls %q, log %q", f.comment, f.calls, log.String())
		}
	})
	t.Run("gives up without failing", func(t *testing.T) {
		f := &fakeSlurm{after: 1 << 30}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 600 * time.Millisecond, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, job, r, false)
		if !strings.Contains(log.String(), "could not record") || f.comment != "" {
			t.Fatalf("log %q, comment %q", log.String(), f.comment)
		}
	})
	t.Run("nothing to record", func(t *testing.T) {
		f := &fakeSlurm{}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, run: f.run}
		a.Record(context.Background(), Config{}, job, nil, false) // no session, no refusal
		(&Accounting{Sacct: "sacct", run: f.run}).Record(context.Background(), Config{}, job, r, false)
		var none *Accounting // the Prolog has none
		none.Record(context.Background(), Config{}, job, r, false)
		if len(f.calls) != 0 {
			t.Fatalf("calls %q", f.calls)
		}
	})
	t.Run("writes again when another write lost its entries", func(t *testing.T) {
		f := &fakeSlurm{clobber: func(f *fakeSlurm) { f.comment = "gpuslice:n2/gpu-a=x" }}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		a.Record(context.Background(), Config{}, Job{ID: "42", Node: "n1", Nodes: []string{"n1", "n2"}}, r, false)
		if got := f.get(); got != "gpuslice:n2/gpu-a=x;n1/gpu-a=quota_mib:1024,peak_mib:768,denied:0" {
			t.Fatalf("AdminComment %q; calls %q", got, f.calls)
		}
	})
}

// The Epilogs of a job's nodes run at once, each writing the whole
// comment: every node's entries end up in it (before, the last writer's
// alone were kept).
func TestRecordManyNodes(t *testing.T) {
	f := &fakeSlurm{after: 3}
	nodes := []string{"n1", "n2", "n3", "n4"}
	var wg sync.WaitGroup
	var want []string
	for i, n := range nodes {
		r := &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-a", LimitBytes: 1 << 30, PeakBytes: uint64(i+1) << 20}}}
		want = append(want, NodeEntries(n, r)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
			a.Record(context.Background(), Config{}, Job{ID: "42", Node: n, Nodes: nodes}, r, false)
		}()
	}
	wg.Wait()
	if got := f.get(); got != FormatComment(want) {
		t.Fatalf("AdminComment %q, want %q", got, FormatComment(want))
	}
}

// The Epilog of the array task whose raw id is the array's job id reads
// only its own comment: `sacct -j 110` prints every task of array 110, and
// the last row (another task's) was taken as its own and merged into it,
// so seff showed that task with another's peak.
func TestRecordArrayTask(t *testing.T) {
	task := func(peak uint64) string {
		return FormatComment(NodeEntries("n9", &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-b", LimitBytes: 4 << 30, PeakBytes: peak}}}))
	}
	f := &fakeSlurm{name: "110_3", siblings: []string{"111|110_1|" + task(1<<30), "112|110_2|" + task(512<<20)}}
	r := &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-a", LimitBytes: 4 << 30, PeakBytes: 1536 << 20}}}
	a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
	a.Record(context.Background(), Config{}, Job{ID: "110", Node: "n9", Nodes: []string{"n9"}}, r, false)
	if got, want := f.get(), FormatComment(NodeEntries("n9", r)); got != want {
		t.Errorf("array task 110_3's AdminComment %q, want %q (its own figures alone)", got, want)
	}
	for i, want := range []string{"111|110_1|" + task(1<<30), "112|110_2|" + task(512<<20)} {
		if f.siblings[i] != want {
			t.Errorf("task 110_3's Epilog changed another task's comment: %q, want %q", f.siblings[i], want)
		}
	}
	if !slices.Contains(f.calls, "sacctmgr -i modify job where jobid=110_3 set AdminComment="+FormatComment(NodeEntries("n9", r))) {
		t.Errorf("sacctmgr not told the task by its array name: %q", f.calls)
	}
}

// On a cluster without accounting storage (no slurmdbd), Slurm's own sacct
// says so at once; the Epilog then stops asking (it asked again and again
// for its whole wait before, holding every node COMPLETING for 20 s after
// each job). Slurm's real sacct and sacctmgr, with a slurm.conf of
// AccountingStorageType=accounting_storage/none.
func TestRecordWithoutAccountingAsksOnce(t *testing.T) {
	sacct, err := exec.LookPath("sacct")
	if err != nil {
		t.Skip("sacct (slurm-client) not installed: make deps")
	}
	sacctmgr, err := exec.LookPath("sacctmgr")
	if err != nil {
		t.Skip("sacctmgr (slurm-client) not installed: make deps")
	}
	conf := filepath.Join(t.TempDir(), "slurm.conf")
	if err := os.WriteFile(conf, []byte("ClusterName=gstest\nSlurmctldHost=localhost\n"+
		"AccountingStorageType=accounting_storage/none\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_CONF", conf)
	var calls []string
	a := &Accounting{Sacctmgr: sacctmgr, Sacct: sacct, Timeout: 5 * time.Second, Wait: 20 * time.Second,
		run: runNoting(&calls)}
	r := &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-a", LimitBytes: 1 << 30, PeakBytes: 768 << 20}}}
	var log bytes.Buffer
	a.Record(context.Background(), Config{Log: &log}, Job{ID: "42", Node: "n1"}, r, false)
	if len(calls) != 1 || calls[0] != "sacct" {
		t.Fatalf("Slurm programs run: %q, want sacct once; log:\n%s", calls, log.String())
	}
	if !strings.Contains(log.String(), "no accounting storage") {
		t.Errorf("log does not say why nothing was recorded:\n%s", log.String())
	}
}

// runNoting runs Slurm's programs for real and notes their names.
func runNoting(calls *[]string) func(ctx context.Context, name string, args ...string) ([]byte, error) {
	return func(ctx context.Context, name string, args ...string) ([]byte, error) {
		*calls = append(*calls, filepath.Base(name))
		return exec.CommandContext(ctx, name, args...).CombinedOutput()
	}
}
