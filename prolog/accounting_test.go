package prolog

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

func TestFormatComment(t *testing.T) {
	r := &client.Report{GPUs: []client.ReportGPU{
		{UUID: "GPU-A1", LimitBytes: 8 << 30, PeakBytes: 5<<30 + 1, Denied: 2},
		{UUID: "GPU-b", LimitBytes: 1 << 30, PeakBytes: 0},
	}}
	want := "gpuslice:gpu-a1=quota_mib:8192,peak_mib:5121,denied:2;gpu-b=quota_mib:1024,peak_mib:0,denied:0"
	if got := FormatComment(r); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOurs(t *testing.T) {
	for existing, want := range map[string]bool{
		"": true, "(null)": true, "gpuslice:gpu-a=quota_mib:1,peak_mib:1,denied:0": true,
		"JS1:abc": false, "gpuslice:x JS1:abc": false, "gpuslice:'x'": false,
	} {
		if got := ours(existing); got != want {
			t.Errorf("ours(%q) = %v, want %v", existing, got, want)
		}
	}
}

// fakeSlurm answers sacct and sacctmgr like slurmdbd would, with the job's
// record appearing after `after` sacct calls.
type fakeSlurm struct {
	after   int
	sacct   int
	comment string
	calls   []string
}

func (f *fakeSlurm) run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	switch name {
	case "sacct":
		f.sacct++
		if f.sacct <= f.after {
			return nil, nil
		}
		return []byte(f.comment + "\n"), nil
	case "sacctmgr":
		if f.sacct <= f.after {
			return []byte(" Nothing modified\n"), nil
		}
		f.comment = strings.TrimPrefix(args[len(args)-1], "AdminComment=")
		return []byte(" Modified jobs...\n"), nil
	}
	return nil, nil
}

func TestRecord(t *testing.T) {
	r := &client.Report{GPUs: []client.ReportGPU{{UUID: "GPU-a", LimitBytes: 1 << 30, PeakBytes: 768 << 20}}}
	want := "gpuslice:gpu-a=quota_mib:1024,peak_mib:768,denied:0"
	t.Run("once slurmdbd has the job", func(t *testing.T) {
		f := &fakeSlurm{after: 2}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, Job{ID: "42"}, r)
		if f.comment != want {
			t.Fatalf("AdminComment %q; calls %q; log %s", f.comment, f.calls, log.String())
		}
		if last := f.calls[len(f.calls)-1]; last != "sacctmgr -i modify job where jobid=42 set AdminComment="+want {
			t.Fatalf("last call %q", last)
		}
	})
	t.Run("leaves the site's comment alone", func(t *testing.T) {
		f := &fakeSlurm{comment: "JS1:AbC"}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 10 * time.Second, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, Job{ID: "42"}, r)
		if f.comment != "JS1:AbC" || len(f.calls) != 1 || !strings.Contains(log.String(), "left alone") {
			t.Fatalf("comment %q, calls %q, log %q", f.comment, f.calls, log.String())
		}
	})
	t.Run("gives up without failing", func(t *testing.T) {
		f := &fakeSlurm{after: 1 << 30}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, Wait: 600 * time.Millisecond, run: f.run}
		var log bytes.Buffer
		a.Record(context.Background(), Config{Log: &log}, Job{ID: "42"}, r)
		if !strings.Contains(log.String(), "could not record") || f.comment != "" {
			t.Fatalf("log %q, comment %q", log.String(), f.comment)
		}
	})
	t.Run("nothing to record", func(t *testing.T) {
		f := &fakeSlurm{}
		a := &Accounting{Sacctmgr: "sacctmgr", Sacct: "sacct", Timeout: time.Second, run: f.run}
		a.Record(context.Background(), Config{}, Job{ID: "42"}, nil) // no session
		(&Accounting{Sacct: "sacct", run: f.run}).Record(context.Background(), Config{}, Job{ID: "42"}, r)
		var none *Accounting // the Prolog has none
		none.Record(context.Background(), Config{}, Job{ID: "42"}, r)
		if len(f.calls) != 0 {
			t.Fatalf("calls %q", f.calls)
		}
	})
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
	a.Record(context.Background(), Config{Log: &log}, Job{ID: "42"}, r)
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
