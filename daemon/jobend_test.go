package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// fakeDBD is Slurm's accounting behind two programs with sacct's and
// sacctmgr's command lines (one ended job, JobIDRaw|JobID|State|NodeList|
// AdminComment, its comment in a file; slurmdbd down while the file
// "down" exists). tests/slurm runs gpusliced against
// Slurm's own programs and a real slurmdbd.
func fakeDBD(t *testing.T, dir, job string) (args []string, comment func() string) {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "comment"), nil, 0o644)
	sacct := "#!/bin/sh\nd=" + dir + "\n[ -e $d/down ] && { echo 'sacct: error: Connection refused' >&2; exit 1; }\n" +
		"echo \"" + job + "|" + job + "|COMPLETED||$(cat $d/comment)\"\n"
	sacctmgr := "#!/bin/sh\nd=" + dir + "\n[ -e $d/down ] && { echo 'sacctmgr: error: Connection refused' >&2; exit 1; }\n" +
		"for a; do v=$a; done\nprintf '%s' \"${v#AdminComment=}\" > $d/comment\necho ' Modified jobs...'\n"
	os.WriteFile(filepath.Join(dir, "sacct"), []byte(sacct), 0o755)
	os.WriteFile(filepath.Join(dir, "sacctmgr"), []byte(sacctmgr), 0o755)
	conf := filepath.Join(dir, "slurm.conf")
	os.WriteFile(conf, []byte("AccountingStorageType=accounting_storage/slurmdbd\n"), 0o644)
	return []string{"--sacct", filepath.Join(dir, "sacct"), "--sacctmgr", filepath.Join(dir, "sacctmgr"), "--slurm-conf", conf},
		func() string { b, _ := os.ReadFile(filepath.Join(dir, "comment")); return string(b) }
}

// The Epilog's one call releases the session and queues this node's
// figures; they reach Slurm's accounting from gpusliced, after a kill -9
// and a restart while slurmdbd was down.
func TestJobEndRecords(t *testing.T) {
	dbd := t.TempDir()
	args, comment := fakeDBD(t, dbd, "77")
	os.WriteFile(filepath.Join(dbd, "down"), nil, 0o644)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB", ExtraArgs: args})
	create(t, d, client.SessionRequest{ID: "77", UID: 0, QuotaBytes: 1 << 30})
	c := mustChild(t, d, "77", 300<<20)
	c.kill()
	waitFor(t, "the child's memory reclaimed", func() (bool, string) {
		s := get(t, d, "77")
		return len(s.Processes) == 0, ""
	})
	end, err := d.Client().EndJob(ctx(t), "77", api.JobEndRequest{Node: "tn2", NodeList: "tn[1-3]", QuotaBytes: 1 << 30})
	if err != nil || end.Report == nil || len(end.Report.GPUs) != 2 || end.Accounting != api.AccountingQueued {
		t.Fatalf("EndJob: %+v, %v", end, err)
	}
	if _, err := d.Client().GetSession(ctx(t), "77"); err == nil {
		t.Fatal("the session is still there after the job's end")
	}
	// Again (an Epilog run twice): nothing more to release or record.
	end, err = d.Client().EndJob(ctx(t), "77", api.JobEndRequest{Node: "tn2", NodeList: "tn[1-3]", QuotaBytes: 1 << 30})
	if err != nil || end.Report != nil || end.Accounting == api.AccountingQueued {
		t.Fatalf("EndJob again: %+v, %v", end, err)
	}
	d.Kill()
	d.Restart()
	os.Remove(filepath.Join(dbd, "down"))
	want := "gpuslice:v2;quota_mib=1024;nodes=3;reported=1;peak_mib=300;peak_on=tn2/"
	waitFor(t, "the figures in the AdminComment", func() (bool, string) {
		return strings.HasPrefix(comment(), want) && strings.HasSuffix(comment(), ";denied=0"), comment()
	})
}

// A refused quota is recorded as the node's refusal; a job without a
// session or refusal records nothing.
func TestJobEndRefusal(t *testing.T) {
	dbd := t.TempDir()
	args, comment := fakeDBD(t, dbd, "78")
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: args})
	end, err := d.Client().EndJob(ctx(t), "79", api.JobEndRequest{Node: "tn1", NodeList: "tn1", QuotaBytes: 1 << 30})
	if err != nil || end.Report != nil || !strings.Contains(end.Accounting, "nothing to record") {
		t.Fatalf("EndJob of a job without a session: %+v, %v", end, err)
	}
	end, err = d.Client().EndJob(ctx(t), "78", api.JobEndRequest{Node: "tn1", NodeList: "tn[1-2]", QuotaBytes: 4 << 30, Refused: true})
	if err != nil || end.Accounting != api.AccountingQueued {
		t.Fatalf("EndJob of a refused job: %+v, %v", end, err)
	}
	waitFor(t, "the refusal in the AdminComment", func() (bool, string) {
		return comment() == "gpuslice:v2;quota_mib=4096;nodes=2;reported=0;refused=0;peak_mib=0;denied=0", comment()
	})
	if _, err := d.Client().EndJob(ctx(t), "78", api.JobEndRequest{NodeList: "tn1"}); err == nil {
		t.Fatal("a job end without a node name was accepted")
	}
}

// A queued record gpusliced cannot read stops it at start, naming the
// record, and the database is left as it was.
func TestBadAccountingRecordStopsStart(t *testing.T) {
	dbd := t.TempDir()
	args, _ := fakeDBD(t, dbd, "80")
	os.WriteFile(filepath.Join(dbd, "down"), nil, 0o644)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: args})
	create(t, d, client.SessionRequest{ID: "80", UID: 0, QuotaBytes: 1 << 30})
	if end, err := d.Client().EndJob(ctx(t), "80", api.JobEndRequest{Node: "tn1", NodeList: "tn1"}); err != nil || end.Accounting != api.AccountingQueued {
		t.Fatalf("EndJob: %+v, %v", end, err)
	}
	d.Stop()
	db := filepath.Join(d.StateDir, "gpusliced.db")
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := st.AcctRecords()
	if len(recs) != 1 {
		t.Fatalf("queued: %+v", recs)
	}
	st.Close()
	// The record's job id damaged on disk (what a bad disk or an old
	// tool could leave).
	b, _ := os.ReadFile(db)
	b2 := []byte(strings.ReplaceAll(string(b), `"job_id":"80"`, `"job_id":"8/"`))
	if string(b2) == string(b) {
		t.Fatal("the record was not found in the file")
	}
	os.WriteFile(db, b2, 0o600)
	cmd := exec.Command(filepath.Join(d.Build, "bin", "gpusliced"), d.Args()...)
	cmd.Env = d.DaemonEnv()
	done := make(chan struct{})
	var out []byte
	go func() { out, _ = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gpusliced started on a queue holding a bad record")
	}
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), "accounting record") || !strings.Contains(string(out), "8/") {
		t.Fatalf("exit %d:\n%s", cmd.ProcessState.ExitCode(), out)
	}
	if after, _ := os.ReadFile(db); string(after) != string(b2) {
		t.Fatal("the database was changed")
	}
}
