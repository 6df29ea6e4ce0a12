package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/cli"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// gs runs the CLI in-process against d.
func gs(t *testing.T, d *testenv.Daemon, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	sock := "/nonexistent/admin.sock"
	if d != nil {
		sock = d.AdminSock
	}
	code := cli.Main(append([]string{"--admin-socket", sock}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommands(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB"})
	steps := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"allocate", []string{"allocate", "--uid", "1000", "--gpu-mem", "8G", "job1"}, 0, []string{"Session job1 (uid 1000)", "8GiB"}},
		{"allocate again (idempotent)", []string{"allocate", "--uid", "1000", "--gpu-mem", "8192", "job1"}, 0, []string{"job1"}},
		{"allocate conflict", []string{"allocate", "--uid", "1001", "--gpu-mem", "8G", "job1"}, cli.ExitConflict, nil},
		{"allocate refused", []string{"allocate", "--gpu-mem", "9G", "job2"}, cli.ExitRefused, []string{"free"}},
		{"allocate one gpu, flags after id", []string{"allocate", "job3", "--gpu-mem", "512M", "--gpus", "1", "--ttl", "2h"}, 0, []string{"512MiB"}},
		{"allocate bad size", []string{"allocate", "--gpu-mem", "8X", "job4"}, cli.ExitUsage, []string{"unknown unit"}},
		{"allocate no size", []string{"allocate", "job4"}, cli.ExitUsage, []string{"--gpu-mem is required"}},
		{"allocate bad id", []string{"allocate", "--gpu-mem", "1G", "a/b"}, cli.ExitUsage, []string{"session id"}},
		{"allocate unknown gpu", []string{"allocate", "--gpu-mem", "1G", "--gpus", "7", "job5"}, cli.ExitUsage, []string{"unknown GPU"}},
		{"status", []string{"status", "job1"}, 0, []string{"QUOTA", "No attached process"}},
		{"status missing", []string{"status", "nope"}, cli.ExitNotFound, []string{"not found"}},
		{"status no id, no IPC socket", []string{"--ipc-socket", "/nonexistent/ipc.sock", "status"}, cli.ExitUnavailable, []string{"unavailable"}},
		{"status two ids", []string{"status", "a", "b"}, cli.ExitUsage, []string{"at most one job ID"}},
		{"list", []string{"list"}, 0, []string{"ID", "job1", "job3", "8GiB each"}},
		{"gpus", []string{"gpus"}, 0, []string{"GPU-", "16GiB", "8.5GiB", "CONTEXT"}},
		{"release", []string{"release", "job3"}, 0, []string{"Session job3", "PEAK"}},
		{"release again", []string{"release", "job3"}, cli.ExitNotFound, nil},
		{"report", []string{"report", "job3"}, 0, []string{"Session job3", "deleted"}},
		{"report missing", []string{"report", "never"}, cli.ExitNotFound, nil},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, []string{"unknown command"}},
		{"unknown flag", []string{"list", "--frob"}, cli.ExitUsage, []string{"unknown flag"}},
		{"version", []string{"--version"}, 0, []string{"gpuslice "}},
		{"help", []string{"help"}, 0, []string{"Commands:", "Exit codes"}},
		{"command help", []string{"allocate", "--help"}, 0, []string{"--gpu-mem", "--uid", "--json"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, out, errs := gs(t, d, st.args...)
			if code != st.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, st.code, out, errs)
			}
			for _, c := range st.contains {
				if !strings.Contains(out+errs, c) {
					t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", c, out, errs)
				}
			}
		})
	}
}

func TestJSON(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	tests := []struct {
		args []string
		into any
	}{
		{[]string{"allocate", "--json", "--gpu-mem", "1G", "j"}, &client.Session{}},
		{[]string{"status", "--json", "j"}, &client.Session{}},
		{[]string{"list", "--json"}, &[]client.Session{}},
		{[]string{"gpus", "--json"}, &[]client.GPU{}},
		{[]string{"release", "--json", "j"}, &client.Report{}},
		{[]string{"report", "--json", "j"}, &client.Report{}},
	}
	for _, tc := range tests {
		t.Run(tc.args[0], func(t *testing.T) {
			code, out, errs := gs(t, d, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if err := json.Unmarshal([]byte(out), tc.into); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	code, _, errs := gs(t, nil, "list")
	if code != cli.ExitUnavailable || !strings.Contains(errs, "unavailable") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// emptyLib builds a shared library that does nothing, to stand in for the
// interceptor where only run's plumbing is under test.
func emptyLib(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "empty.c")
	lib := filepath.Join(dir, "libempty.so")
	os.WriteFile(src, []byte("int gpuslice_test_empty;\n"), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

func TestRun(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	bin := testenv.Artifact(t, "bin/gpuslice")
	lib := emptyLib(t)
	other := emptyLib(t)
	script := `echo "$LD_PRELOAD|$GPUSLICE_SESSION|$GPUSLICE_IPC_SOCK"; exit 7`
	cmd := exec.Command(bin, "--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock,
		"run", "--gpu-mem", "2G", "--id", "myrun", "--preload", lib, "--", "sh", "-c", script)
	cmd.Env = append(testenv.BaseEnv(), "LD_PRELOAD="+other)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("exit %v, want 7 (passed through)\n%s", err, stderr.String())
	}
	want := other + ":" + lib + "|myrun|" + d.IPCSock
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("child saw %q, want %q", out, want)
	}
	if !strings.Contains(stderr.String(), "session myrun released") {
		t.Fatalf("no release summary: %s", stderr.String())
	}
	if _, err := d.Client().GetSession(context.Background(), "myrun"); err == nil {
		t.Fatal("session still exists after run")
	}
	rep, err := d.Client().History(context.Background(), "myrun")
	if err != nil || rep.GPUs[0].LimitBytes != 2<<30 || rep.UID != uint32(os.Getuid()) {
		t.Fatalf("history %+v, %v", rep, err)
	}

	t.Run("session exists while the command runs", func(t *testing.T) {
		c := exec.Command(bin, "--admin-socket", d.AdminSock, "run", "-q", "--gpu-mem", "1G", "--preload", lib,
			"--", bin, "--admin-socket", d.AdminSock, "status", "--json", "run-probe")
		c.Env = testenv.BaseEnv()
		c.Args = append(c.Args[:4], append([]string{"--id", "run-probe"}, c.Args[4:]...)...)
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"id": "run-probe"`) {
			t.Fatalf("status from inside run: %v\n%s", err, out)
		}
	})

	t.Run("signals are forwarded", func(t *testing.T) {
		c := exec.Command(bin, "--admin-socket", d.AdminSock, "run", "-q", "--gpu-mem", "1G", "--id", "sig", "--preload", lib,
			"--", "sh", "-c", `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`)
		c.Env = testenv.BaseEnv()
		stdout, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		n, _ := stdout.Read(buf)
		if !strings.Contains(string(buf[:n]), "ready") {
			t.Fatalf("child did not start: %q", buf[:n])
		}
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			t.Fatal("run did not exit after SIGTERM")
		}
		if code := c.ProcessState.ExitCode(); code != 42 {
			t.Fatalf("exit %d, want 42 from the child's TERM trap", code)
		}
		if _, err := d.Client().History(context.Background(), "sig"); err != nil {
			t.Fatalf("session not released after a signal: %v", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			code int
		}{
			{"no command", []string{"run", "--gpu-mem", "1G", "--preload", lib}, cli.ExitUsage},
			{"command not found", []string{"run", "--gpu-mem", "1G", "--preload", lib, "--", "/nonexistent/prog"}, 127},
			{"no preload", []string{"run", "--gpu-mem", "1G", "--preload", "/nonexistent.so", "--", "true"}, cli.ExitError},
			{"refused", []string{"run", "--gpu-mem", "100G", "--preload", lib, "--", "true"}, cli.ExitRefused},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := exec.Command(bin, append([]string{"--admin-socket", d.AdminSock}, tc.args...)...)
				c.Env = testenv.BaseEnv()
				out, _ := c.CombinedOutput()
				if got := c.ProcessState.ExitCode(); got != tc.code {
					t.Fatalf("exit %d, want %d\n%s", got, tc.code, out)
				}
			})
		}
	})
}

// TestStatusAsJobUser: the admin socket is root-only, so a job's user gets
// its session over the IPC socket, and only its own.
func TestStatusAsJobUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs the CLI as other uids and must run as root (CI does)")
	}
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	bin := testenv.Artifact(t, "bin/gpuslice")
	if _, err := d.Client().CreateSession(context.Background(), client.SessionRequest{ID: "owned", UID: 4242, QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		uid  uint32
		id   string
		code int
		want string
	}{
		{"owner", 4242, "owned", 0, `"id": "owned"`},
		{"other user", 4243, "owned", cli.ExitNotFound, "no job of yours with that id on this node"},
		{"unknown session", 4242, "nope", cli.ExitNotFound, "no job of yours with that id on this node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := exec.Command(bin, "--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock, "status", "--json", tc.id)
			c.Env = testenv.BaseEnv()
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid}}
			out, _ := c.CombinedOutput()
			if got := c.ProcessState.ExitCode(); got != tc.code || !strings.Contains(string(out), tc.want) {
				t.Fatalf("exit %d (want %d), output:\n%s", got, tc.code, out)
			}
		})
	}
}
