package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
)

// event is one key=value line of target_app's output.
type event map[string]string

func events(out string) []event {
	var evs []event
	for _, line := range strings.Split(out, "\n") {
		e := event{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				e[k] = v
			}
		}
		if e["event"] != "" {
			evs = append(evs, e)
		}
	}
	return evs
}

// find returns the first event of kind with every key=value of match.
func find(evs []event, kind string, match ...string) event {
	for _, e := range evs {
		if e["event"] != kind {
			continue
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if e[match[i]] != match[i+1] {
				ok = false
			}
		}
		if ok {
			return e
		}
	}
	return nil
}

func (e event) u64(t *testing.T, k string) uint64 {
	t.Helper()
	if e == nil {
		t.Fatalf("missing event (wanted key %s)", k)
	}
	v, err := strconv.ParseUint(e[k], 10, 64)
	if err != nil {
		t.Fatalf("event %v: %s=%q is not a number", e, k, e[k])
	}
	return v
}

// appRun describes target_app's run: allocations allowed and denied, and
// the memory it saw before allocating.
type appRun struct {
	allowed, denied   uint64
	total, freeBefore uint64
	evs               []event
}

func parseApp(t *testing.T, out string) appRun {
	t.Helper()
	evs := events(out)
	before := find(evs, "meminfo", "when", "before")
	if before == nil {
		t.Fatalf("target_app output lacks its first meminfo:\n%s", out)
	}
	a := appRun{total: before.u64(t, "total"), freeBefore: before.u64(t, "free"), evs: evs}
	// Count the allocations themselves: a process killed while holding
	// memory never prints its summary.
	for _, e := range evs {
		if e["event"] == "alloc" {
			switch e["status"] {
			case "allowed":
				a.allowed++
			case "denied":
				a.denied++
			}
		}
	}
	if sum := find(evs, "summary"); sum != nil && (sum.u64(t, "allowed") != a.allowed || sum.u64(t, "denied") != a.denied) {
		t.Fatalf("target_app's summary disagrees with its allocations:\n%s", out)
	}
	return a
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var (
	reGranted   = regexp.MustCompile(`(?:Granted job allocation|jobid) (\d+)`)
	reSubmitted = regexp.MustCompile(`^(\d+)`)
)

// sbatch submits script (written to the user's directory) and returns the
// job id.
func (c *cluster) sbatch(t *testing.T, u *testUser, name, script string, args ...string) string {
	t.Helper()
	path := filepath.Join(u.dir, name+".sh")
	if err := writeFile(path, script, 0o755); err != nil {
		t.Fatal(err)
	}
	r := run(ctxFor(t, time.Minute), c.cmd(u, "sbatch", append(append([]string{"--parsable"}, args...), path)...))
	if r.code != 0 {
		t.Fatalf("sbatch %s: %s", name, r)
	}
	m := reSubmitted.FindStringSubmatch(strings.TrimSpace(r.stdout))
	if m == nil {
		t.Fatalf("sbatch %s: no job id in %q", name, r.stdout)
	}
	id := m[1]
	t.Cleanup(func() { _ = c.cmd(nil, "scancel", id).Run() })
	return id
}

// jobID finds the job id srun/salloc created (from -v output or
// the SLURM_JOB_ID the task printed).
func jobID(t *testing.T, r result) string {
	t.Helper()
	if m := reGranted.FindStringSubmatch(r.stderr); m != nil {
		return m[1]
	}
	for _, e := range events(r.stdout) {
		if e["job"] != "" {
			return e["job"]
		}
	}
	t.Fatalf("no job id in output: %s", r)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// waitSession waits until job's session has n attached processes using
// used bytes in total on its GPU.
func (c *cluster) waitSession(t *testing.T, id string, n int, used uint64, d time.Duration) {
	t.Helper()
	err := waitFor(d, func() error {
		s, err := c.session(id)
		if err != nil {
			return err
		}
		var u uint64
		for _, g := range s.GPUs {
			u += g.UsedBytes
		}
		if len(s.Processes) != n || u != used {
			return fmt.Errorf("session %s: %d processes using %d bytes, want %d using %d", id, len(s.Processes), u, n, used)
		}
		return nil
	})
	if err != nil {
		j, _ := c.job(id)
		t.Fatalf("%v (job: %v)", err, j)
	}
}
