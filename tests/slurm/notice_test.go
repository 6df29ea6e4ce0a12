package slurm

// What a user is told without asking (docs/user-guide.md): the
// interceptor's line when the quota refuses an allocation, and at the end
// of each step, on srun's terminal and in the batch job's output file,
// what the job used and what to ask next time. Off for a job
// (GPUSLICE_NOTICE) and for the cluster (plugstack.conf notice=).

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	reStepLine = regexp.MustCompile(`^gpuslice: job (\d+) \((step \d+|batch step|interactive step) on (\S+)\): ` +
		`GPU memory peak (\S+) of its (\S+) quota \((\d+)%\), (no allocation refused|\d+ allocations? refused)$`)
	reAdviceLine = regexp.MustCompile(`^gpuslice: job (\d+) (?:used well below its quota: next time --gpu-mem=(\S+) would do ` +
		`\(its peak plus a margin\)|reached its quota: next time ask for more, e\.g\. --gpu-mem=(\S+))$`)
	reRefusalLine = regexp.MustCompile(`^gpuslice: job (\d+): an allocation of (\S+) on GPU (\d+) was refused: ` +
		`the job holds (\S+) of its (\S+) quota on that GPU \(([^)]*)\)\. CUDA reports out of memory\. More: gpuslice status (\d+)`)
)

// told is what gpuslice told the user in some output.
type told struct {
	steps    [][]string // reStepLine matches
	advice   [][]string // reAdviceLine matches
	refusals [][]string // reRefusalLine matches
	other    []string   // any other line starting with "gpuslice: "
}

func toldIn(out string) told {
	var t told
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "gpuslice: ") {
			continue
		}
		switch {
		case reStepLine.MatchString(l):
			t.steps = append(t.steps, reStepLine.FindStringSubmatch(l))
		case reAdviceLine.MatchString(l):
			t.advice = append(t.advice, reAdviceLine.FindStringSubmatch(l))
		case reRefusalLine.MatchString(l):
			t.refusals = append(t.refusals, reRefusalLine.FindStringSubmatch(l))
		default:
			t.other = append(t.other, l)
		}
	}
	return t
}

// ask is the --gpu-mem an advice line suggests.
func ask(m []string) string { return m[2] + m[3] }

// srun on the user's terminal: the refusal says why, and when the step
// ends its line says the job's peak, quota and refusals, and what to ask
// next time.
func TestStepEndLinesSrun(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	// 3 x 300 MiB fit 1 GiB, the fourth is refused
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "--gpu-mem=1G", c.bin("target_app"), "--step", "300M", "--count", "4"))
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	id := jobID(t, r)
	node := c.jobNode(t, id).Name
	got := toldIn(r.stderr)
	if len(got.refusals) != 1 || len(got.steps) != 1 || len(got.advice) != 1 || len(got.other) != 0 {
		t.Fatalf("srun's stderr: want one refusal line, one end-of-step line and one advice: %s", r)
	}
	if m := got.refusals[0]; m[1] != id || m[2] != "300MiB" || m[4] != "900MiB" || m[5] != "1GiB" ||
		!strings.HasPrefix(m[6], "--gpu-mem=1G; the GPU itself has ") || m[7] != id {
		t.Errorf("refusal line: %q", m[0])
	}
	if m := got.steps[0]; m[1] != id || m[2] != "step 0" || m[3] != node || m[4] != "900MiB" || m[5] != "1GiB" ||
		m[6] != "88" || m[7] != "1 allocation refused" {
		t.Errorf("end-of-step line: %q (job %s on %s)", m[0], id, node)
	}
	if m := got.advice[0]; m[1] != id || ask(m) != "1536M" || !strings.Contains(m[0], "reached its quota") {
		t.Errorf("advice: %q", m[0])
	}
	// the lines come after everything the task wrote
	if i, j := strings.Index(r.stderr, got.steps[0][0]), strings.Index(r.stderr, got.refusals[0][0]); i < j {
		t.Errorf("the end-of-step line comes before the task's own output:\n%s", r.stderr)
	}
}

// sbatch: each srun step's lines and the batch step's, in the job's output
// file; a peak well below the quota gets a smaller --gpu-mem to ask for.
func TestStepEndLinesSbatch(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	script := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=2G
#SBATCH --output=%[1]s/notice-%%j.out
srun %[2]s --step 256M --count 1
echo batch_done
`, u.dir, c.bin("target_app"))
	id := c.sbatch(t, u, "notice", script)
	j := c.waitJobEnd(t, id, 3*time.Minute)
	out := filepath.Join(u.dir, "notice-"+id+".out")
	if j["JobState"] != "COMPLETED" {
		t.Fatalf("job %s: %v\n%s", id, j, readFile(t, out))
	}
	node := c.jobNode(t, id).Name
	var got told
	err := waitFor(30*time.Second, func() error {
		got = toldIn(readFile(t, out))
		if len(got.steps) < 2 {
			return fmt.Errorf("%d end-of-step lines", len(got.steps))
		}
		return nil
	})
	text := readFile(t, out)
	if err != nil || len(got.steps) != 2 || len(got.advice) != 2 || len(got.refusals) != 0 || len(got.other) != 0 {
		t.Fatalf("job %s's output: want the lines of step 0 and of the batch step (%v):\n%s", id, err, text)
	}
	for i, step := range []string{"step 0", "batch step"} {
		if m := got.steps[i]; m[1] != id || m[2] != step || m[3] != node || m[4] != "256MiB" || m[5] != "2GiB" ||
			m[6] != "13" || m[7] != "no allocation refused" {
			t.Errorf("line %d: %q, want %s on %s", i, m[0], step, node)
		}
		if m := got.advice[i]; m[1] != id || ask(m) != "512M" || !strings.Contains(m[0], "well below") {
			t.Errorf("advice %d: %q", i, m[0])
		}
	}
	if strings.Index(text, "batch_done") > strings.Index(text, got.steps[1][0]) {
		t.Errorf("the batch step's line comes before the script's end:\n%s", text)
	}
}

// A step on two nodes: each node says what the job used on its GPUs.
func TestStepEndLinesTwoNodes(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", "-v", "-N2", "--gpu-mem=1G", c.bin("target_app"), "--step", "256M", "--count", "1"))
	if r.code != 0 {
		t.Fatalf("srun: %s", r)
	}
	id := jobID(t, r)
	got := toldIn(r.stderr)
	if len(got.steps) != 2 || len(got.advice) != 2 || len(got.refusals) != 0 || len(got.other) != 0 {
		t.Fatalf("srun -N2: want the lines of each node: %s", r)
	}
	var nodes []string
	for _, m := range got.steps {
		if m[1] != id || m[2] != "step 0" || m[4] != "256MiB" || m[5] != "1GiB" || m[7] != "no allocation refused" {
			t.Errorf("end-of-step line: %q", m[0])
		}
		nodes = append(nodes, m[3])
	}
	sort.Strings(nodes)
	var want []string
	for _, n := range c.jobNodes(t, id) {
		want = append(want, n.Name)
	}
	sort.Strings(want)
	if strings.Join(nodes, ",") != strings.Join(want, ",") {
		t.Errorf("lines from nodes %v, job ran on %v", nodes, want)
	}
	for _, m := range got.advice {
		if ask(m) != "512M" {
			t.Errorf("advice: %q", m[0])
		}
	}
}

// Off: for a job, the user's GPUSLICE_NOTICE; for the cluster,
// plugstack.conf's notice=, which the user cannot turn back on. The quota
// holds either way.
func TestStepEndLinesOff(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	srun := func(t *testing.T, env ...string) told {
		t.Helper()
		cmd := c.cmd(u, "srun", "--gpu-mem=1G", c.bin("target_app"), "--step", "300M", "--count", "4")
		cmd.Env = append(cmd.Env, env...)
		r := run(ctxFor(t, 2*time.Minute), cmd)
		if r.code != 0 {
			t.Fatalf("srun: %s", r)
		}
		if app := parseApp(t, r.stdout); app.allowed != 3 || app.denied != 1 {
			t.Fatalf("allowed %d denied %d, want 3 and 1", app.allowed, app.denied)
		}
		got := toldIn(r.stderr)
		if len(got.other) != 0 {
			t.Fatalf("other gpuslice lines: %s", r)
		}
		return got
	}
	count := func(g told) string {
		return fmt.Sprintf("%d refusal, %d end-of-step, %d advice", len(g.refusals), len(g.steps), len(g.advice))
	}
	for _, tc := range []struct {
		name, plugstack, env, want string
	}{
		{"on", "", "", "1 refusal, 1 end-of-step, 1 advice"},
		{"the user: off", "", "GPUSLICE_NOTICE=off", "0 refusal, 0 end-of-step, 0 advice"},
		{"the user: refusal", "", "GPUSLICE_NOTICE=refusal", "1 refusal, 0 end-of-step, 0 advice"},
		{"the user: summary", "", "GPUSLICE_NOTICE=summary", "0 refusal, 1 end-of-step, 1 advice"},
		{"the cluster: off", "notice=off", "GPUSLICE_NOTICE=on", "0 refusal, 0 end-of-step, 0 advice"},
		{"the cluster: summary", "notice=summary", "", "0 refusal, 1 end-of-step, 1 advice"},
		{"the cluster: summary, the user: refusal", "notice=summary", "GPUSLICE_NOTICE=refusal", "0 refusal, 0 end-of-step, 0 advice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.plugstack != "" {
				c.withPlugstack(t, tc.plugstack)
			}
			var env []string
			if tc.env != "" {
				env = append(env, tc.env)
			}
			if got := count(srun(t, env...)); got != tc.want {
				t.Errorf("told %s, want %s", got, tc.want)
			}
		})
	}
}
