// Package slurm is gpuslice's end-to-end suite on a real Slurm: Debian's
// slurmctld, slurmd and munge on loopback, the built SPANK plugin,
// Prolog/Epilog, gpusliced and fakecuda (one 80 GiB device), all in a
// temporary directory. See docs/slurm.md.
package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// prologRetry is the Prolog/Epilog --retry-timeout in the test cluster.
const prologRetry = 10 * time.Second

var (
	cl       *cluster
	skipWhy  string
	setupErr error
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		skipWhy = "the Slurm end-to-end suite needs root (it runs slurmctld, slurmd, munged and submits jobs as test users)"
		fmt.Fprintln(os.Stderr, "slurm suite: SKIP: "+skipWhy)
		os.Exit(m.Run())
	}
	cl = &cluster{}
	setupErr = startCluster(cl)
	if setupErr != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: cluster setup failed: %v\n", setupErr)
		cl.dumpLogs(os.Stderr)
		cl.stop()
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		cl.dumpLogs(os.Stderr)
	}
	cl.stop()
	os.Exit(code)
}

// cluster returns the running cluster or skips the test.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	return cl
}

func (c *cluster) dumpLogs(w *os.File) {
	if c == nil || c.dir == "" {
		return
	}
	for _, f := range []string{"slurmctld.log", "slurmd.log", "gpusliced.out", "slurmctld.out", "slurmd.out", "munged.out"} {
		b, err := os.ReadFile(c.path("log", f))
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		fmt.Fprintf(w, "----- %s (last %d lines)\n%s\n", f, len(lines), strings.Join(lines, "\n"))
	}
}

func (c *cluster) client() *client.Client { return client.New(c.admSock) }

func (c *cluster) gpus() ([]client.GPU, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := c.client()
	defer cl.Close()
	return cl.GPUs(ctx)
}

func (c *cluster) session(id string) (*client.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := c.client()
	defer cl.Close()
	return cl.GetSession(ctx, id)
}

// nodeState is sinfo's %T for the node ("idle", "mixed", "allocated",
// "drained", ...).
func (c *cluster) nodeState() (string, error) {
	out, err := c.cmd(nil, "sinfo", "-h", "-n", c.node, "-o", "%T").Output()
	if err != nil {
		return "", fmt.Errorf("sinfo: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *cluster) waitNodeState(want string, d time.Duration) error {
	return waitFor(d, func() error {
		st, err := c.nodeState()
		if err != nil {
			return err
		}
		if st != want {
			return fmt.Errorf("node %s is %q, want %q", c.node, st, want)
		}
		return nil
	})
}

// job returns scontrol's fields of a job (one-line form).
func (c *cluster) job(id string) (map[string]string, error) {
	out, err := c.cmd(nil, "scontrol", "-o", "show", "job", id).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("scontrol show job %s: %v: %s", id, err, out)
	}
	m := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// jobCount is the number of jobs slurmctld knows (MinJobAge keeps finished
// ones for the whole suite).
func (c *cluster) jobCount(t *testing.T) int {
	t.Helper()
	out, err := c.cmd(nil, "scontrol", "-o", "show", "jobs").CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show jobs: %v: %s", err, out)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "JobId=") {
			n++
		}
	}
	return n
}

// waitJobEnd waits until the job has left the running states and its
// Epilog has finished (the node no longer completing).
func (c *cluster) waitJobEnd(t *testing.T, id string, d time.Duration) map[string]string {
	t.Helper()
	var last map[string]string
	err := waitFor(d, func() error {
		j, err := c.job(id)
		if err != nil {
			return err
		}
		last = j
		switch j["JobState"] {
		case "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED":
			return fmt.Errorf("job %s is %s", id, j["JobState"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("job %s did not end: %v", id, err)
	}
	return last
}

// assertReleased checks what must hold after every job: the session is
// gone, the GPU has no committed or used bytes left, the node is idle (not
// drained), and `gpuslice report <id>` shows the job's figures. It returns
// the report's text.
func (c *cluster) assertReleased(t *testing.T, id string) string {
	t.Helper()
	if err := waitFor(30*time.Second, func() error {
		_, err := c.session(id)
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("session %s still exists (err %v)", id, err)
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(30*time.Second, func() error {
		gpus, err := c.gpus()
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if g.CommittedBytes != 0 || g.UsedBytes != 0 || g.Sessions != 0 {
				return fmt.Errorf("GPU %s: committed %d, used %d, sessions %d", g.UUID, g.CommittedBytes, g.UsedBytes, g.Sessions)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitNodeState("idle", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := c.cmd(nil, c.bin("gpuslice"), "report", id)
	cmd.Env = append(cmd.Env, "GPUSLICE_ADMIN_SOCK="+c.admSock)
	rep := run(ctx, cmd)
	if rep.code != 0 {
		t.Fatalf("gpuslice report %s: %s", id, rep)
	}
	if !strings.Contains(rep.stdout, "PEAK") || !strings.Contains(rep.stdout, "FINAL USED") {
		t.Fatalf("gpuslice report %s shows no peak and final usage:\n%s", id, rep.stdout)
	}
	return rep.stdout
}

// history is the report of a released session as `gpuslice report --json`
// prints it.
func (c *cluster) history(t *testing.T, id string) *client.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := c.cmd(nil, c.bin("gpuslice"), "report", "--json", id)
	cmd.Env = append(cmd.Env, "GPUSLICE_ADMIN_SOCK="+c.admSock)
	r := run(ctx, cmd)
	if r.code != 0 {
		t.Fatalf("gpuslice report --json %s: %s", id, r)
	}
	var rep client.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("gpuslice report --json %s: %v\n%s", id, err, r.stdout)
	}
	if rep.ID != id || len(rep.GPUs) == 0 {
		t.Fatalf("gpuslice report --json %s: %+v", id, rep)
	}
	return &rep
}
