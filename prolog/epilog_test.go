package prolog

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The Epilog's one partner is gpusliced: with Slurm's accounting hanging
// (sacct and sacctmgr that never answer), the Epilog releases the session
// and returns with the figures queued in gpusliced, running neither. The
// flags earlier releases' Epilog took are accepted and said to be
// ignored.
func TestEpilogOnlyTalksToGpusliced(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	hang := "#!/bin/sh\necho \"$0 $PPID\" >> " + ran + "\nexec sleep 3600\n"
	for _, p := range []string{"sacct", "sacctmgr"} {
		os.WriteFile(filepath.Join(dir, p), []byte(hang), 0o755)
	}
	conf := filepath.Join(dir, "slurm.conf")
	os.WriteFile(conf, []byte("AccountingStorageType=accounting_storage/slurmdbd\n"), 0o644)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x8GiB", ExtraArgs: []string{
		"--sacct", filepath.Join(dir, "sacct"), "--sacctmgr", filepath.Join(dir, "sacctmgr"), "--slurm-conf", conf}})
	if _, err := d.Client().CreateSession(testenv.Context(t), client.SessionRequest{ID: "310", UID: 1000, QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLURM_JOB_ID": "310", "SLURM_JOB_UID": "1000", "SLURMD_NODENAME": "tn1",
		"SLURM_JOB_NODELIST": "tn[1-2]", "SPANK_GPU_MEM": "1073741824"}
	var stderr bytes.Buffer
	code := Main(ModeEpilog, []string{"--admin-socket", d.AdminSock, "--refusal-dir", filepath.Join(dir, "refused"),
		"--sacctmgr", "/usr/bin/sacctmgr", "--accounting-wait", "5s"}, envFunc(env), &stderr)
	if code != 0 {
		t.Fatalf("Epilog exit %d:\n%s", code, stderr.String())
	}
	for _, want := range []string{"--sacctmgr is ignored", "--accounting-wait is ignored", "job 310: released GPU-",
		"job 310: figures queued by gpusliced for Slurm's accounting"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("Epilog's log lacks %q:\n%s", want, stderr.String())
		}
	}
	if _, err := d.Client().GetSession(testenv.Context(t), "310"); err == nil {
		t.Error("the session is still there")
	}
	// Whatever ran sacct or sacctmgr was gpusliced, never the Epilog
	// (which runs in this process).
	b, _ := os.ReadFile(ran)
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("the Epilog ran %s itself", f[0])
		}
	}
}
