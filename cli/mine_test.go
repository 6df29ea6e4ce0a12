package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/cli"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// asUser runs the built CLI as uid with extra environment.
func asUser(t *testing.T, d *testenv.Daemon, uid uint32, env []string, args ...string) (int, string) {
	t.Helper()
	bin := testenv.Artifact(t, "bin/gpuslice")
	c := exec.Command(bin, append([]string{"--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock}, args...)...)
	c.Env = append(testenv.BaseEnv(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, _ := c.CombinedOutput()
	return c.ProcessState.ExitCode(), string(out)
}

// TestOwnJobView: users read their own jobs without root, over the IPC
// socket; another user's job reads exactly like a job that does not exist.
func TestOwnJobView(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs the CLI as other uids and must run as root (CI does)")
	}
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB"})
	ctx := context.Background()
	for _, r := range []client.SessionRequest{
		{ID: "1001", UID: 4242, QuotaBytes: 2 << 30},
		{ID: "1002", UID: 4242, QuotaBytes: 1 << 30, GPUs: []string{"1"}},
		{ID: "2001", UID: 4243, QuotaBytes: 3 << 30},
	} {
		if _, err := d.Client().CreateSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Client().DeleteSession(ctx, "1002"); err != nil {
		t.Fatal(err)
	}

	t.Run("status inside the job", func(t *testing.T) {
		code, out := asUser(t, d, 4242, []string{"GPUSLICE_SESSION=1001"}, "status", "--json")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		var js client.JobStatus
		if err := json.Unmarshal([]byte(out), &js); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if js.ID != "1001" || len(js.GPUs) != 2 || js.GPUs[0].LimitBytes != 2<<30 || js.UsageSource != "ledger" {
			t.Fatalf("status = %+v", js)
		}
	})
	t.Run("status without a job in the environment: the only live job", func(t *testing.T) {
		code, out := asUser(t, d, 4242, nil, "status")
		if code != 0 || !strings.Contains(out, "Session 1001") || !strings.Contains(out, "2GiB") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("report of a finished job", func(t *testing.T) {
		code, out := asUser(t, d, 4242, nil, "report", "--json", "1002")
		var r client.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.ID != "1002" || r.GPUs[0].LimitBytes != 1<<30 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("report of a running job of the caller's", func(t *testing.T) {
		code, out := asUser(t, d, 4242, nil, "report", "1001")
		if code != cli.ExitNotFound || !strings.Contains(out, "still running") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("list --mine", func(t *testing.T) {
		code, out := asUser(t, d, 4242, nil, "list", "--mine", "--json")
		var j cli.MyJobs
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if len(j.Running) != 1 || j.Running[0].ID != "1001" || len(j.Finished) != 1 || j.Finished[0].ID != "1002" {
			t.Fatalf("list --mine = %+v", j)
		}
		code, out = asUser(t, d, 4242, nil, "list", "--mine")
		if code != 0 || !strings.Contains(out, "Running:") || !strings.Contains(out, "Finished:") || strings.Contains(out, "2001") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	// Another user's job, live or finished, and jobs that never existed:
	// one and the same line, nothing about the job.
	notYours := [][]string{
		{"status", "1001"}, {"status", "2999"},
		{"report", "1002"}, {"report", "1999"},
		{"status", "a.b"}, {"report", "-"},
	}
	var first string
	for _, args := range notYours {
		for _, js := range []bool{false, true} {
			a := append([]string{}, args...)
			if js {
				a = append(a, "--json")
			}
			code, out := asUser(t, d, 4243, nil, a...)
			if code != cli.ExitNotFound {
				t.Fatalf("%v: exit %d:\n%s", a, code, out)
			}
			line := strings.Replace(out, "gpuslice "+args[0]+": ", "", 1)
			if first == "" {
				first = line
			}
			if line != first || strings.Count(out, "\n") != 1 || strings.Contains(out, "4242") || strings.Contains(out, args[1]) {
				t.Fatalf("%v: %q, want the same single line as the others (%q)", a, out, first)
			}
		}
	}
	if !strings.Contains(first, "no job of yours with that id on this node") {
		t.Fatalf("refusal line %q", first)
	}
	t.Run("inside another user's job by its environment", func(t *testing.T) {
		code, out := asUser(t, d, 4243, []string{"GPUSLICE_SESSION=1001"}, "status")
		if code != cli.ExitNotFound || out != "gpuslice status: "+first {
			t.Fatalf("exit %d: %q", code, out)
		}
	})
	t.Run("other user's list --mine is their own", func(t *testing.T) {
		code, out := asUser(t, d, 4243, nil, "list", "--mine", "--json")
		var j cli.MyJobs
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil || len(j.Running) != 1 || j.Running[0].ID != "2001" || len(j.Finished) != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("the admin socket stays root-only", func(t *testing.T) {
		code, out := asUser(t, d, 4242, nil, "gpus")
		if code != cli.ExitUnavailable || !strings.Contains(out, "permission denied") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}
