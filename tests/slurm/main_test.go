// Package slurm is gpuslice's end-to-end suite on a real Slurm: Debian's
// slurmctld and munge on the machine, two slurmd hosts in namespaces of
// their own, each with its gpusliced and fakecuda GPUs (2x16 GiB on tn1,
// 2x40 GiB on tn2; GPUSLICE_SLURM_QUAD=1 adds tn3, 4x16 GiB), the
// built SPANK plugin, Prolog/Epilog and the shipped
// job_submit.lua, all in a temporary directory. See docs/slurm.md.
//
// The suite runs on Debian 12's Slurm 22.05 on the machine, or, with
// GPUSLICE_SLURM_RELEASE=24.11 (make test-slurm-24.11), on Debian 13's Slurm
// 24.11 in the Debian 13 root (make trixie-root): the test binary then runs
// a copy of itself in the root (internal/debroot), which builds the same
// cluster there from the root's Slurm and munge, the plugin built for 24.11
// and the machine's build of everything else. With
// GPUSLICE_SLURM_RELEASE=23.11, 24.05, 25.05, 25.11 or 26.05 (make
// test-slurm-RELEASE) it runs on SchedMD's release built from source in
// build/slurm/RELEASE (make slurm-src), on this machine: the whole suite
// on 26.05, the core subset (coreTests) on the others. What differs
// between the releases is in slurmconf_test.go.
//
// The harness, for suites that plug in: startCluster(c, ClusterOptions)
// (defaultOptions()), c.cmd(user, ...) submits as a user from the submit
// host, n.onNode(user, ...) runs on a node, n.client()/n.session/n.gpus
// query a node's gpusliced, c.jobNodes(id) tells where a job ran, and
// c.drained() samples sinfo.
package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/debroot"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

var (
	cl       *cluster
	skipWhy  string
	setupErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if code, ok := soakRole(); ok {
		os.Exit(code)
	}
	name := os.Getenv("GPUSLICE_SLURM_RELEASE")
	if name == "" {
		name = slurm2205.name
	}
	rel, ok := releases[name]
	if !ok {
		var names []string
		for n := range releases {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "slurm suite: GPUSLICE_SLURM_RELEASE=%s: the suite runs on %s\n", name, strings.Join(names, ", "))
		os.Exit(2)
	}
	slurm = rel
	useNet(slurm.net)
	opts := defaultOptions
	if soakWanted() {
		// The soak's own cluster and network (soak_test.go), so that it
		// runs beside the suite on any release.
		useNet(soakNet)
		opts = soakOptions
	}
	if slurm.tree != "" {
		if skipWhy = useTree(); skipWhy != "" {
			fmt.Fprintln(os.Stderr, "slurm suite: SKIP: "+skipWhy)
			os.Exit(m.Run())
		}
	}
	var err error
	if tracking, err = trackingFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "slurm suite: "+err.Error())
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		skipWhy = "the Slurm end-to-end suite needs root (it runs slurmctld, slurmd, munged, network namespaces and submits jobs as test users)"
		fmt.Fprintln(os.Stderr, "slurm suite: SKIP: "+skipWhy)
		os.Exit(m.Run())
	}
	if slurm.inRoot && !debroot.Inside() {
		os.Exit(runInRoot(m))
	}
	start := time.Now()
	cl = &cluster{}
	setupErr = startCluster(cl, opts())
	if setupErr != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: cluster setup failed: %v\n", setupErr)
		cl.dumpLogs(os.Stderr)
		cl.stop()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "slurm suite: %d-node cluster on Slurm %s (job tracking: %s) up in %v\n", len(cl.nodes), slurm.name, tracking.name, time.Since(start).Round(time.Second))
	code := m.Run()
	if code != 0 {
		cl.dumpLogs(os.Stderr)
	}
	cl.stop()
	os.Exit(code)
}

// runInRoot runs this test binary in the Debian 13 root and returns its
// exit status. The run's lock is taken here, on the machine: the bridge and
// veths live in the machine's network namespace, which the runs from every
// checkout's root share. When the root cannot be had here, the tests run
// and skip with the reason.
func runInRoot(m *testing.M) int {
	build, err := testenv.FindBuildDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		return 1
	}
	repo, err := repoFile(".")
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		return 1
	}
	if err := debroot.Ready(build); err != nil {
		if errors.Is(err, debroot.ErrSkip) {
			skipWhy = err.Error()
			fmt.Fprintln(os.Stderr, "slurm suite: SKIP: "+skipWhy)
			return m.Run()
		}
		fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(build, slurm.plugin)); err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: no plugin for Slurm %s (make spank-24.11): %v\n", slurm.name, err)
		return 1
	}
	lock, err := takeLock(lockFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		return 1
	}
	defer lock.Close()
	env := []string{"GPUSLICE_SLURM_RELEASE=" + slurm.name}
	for _, k := range []string{"GPUSLICE_SLURM_ACCOUNTING", "GPUSLICE_KEEP_TEST_DIR", "GPUSLICE_SLURM_TRACKING", "GPUSLICE_SLURM_QUAD",
		"GPUSLICE_SOAK_DURATION", "GPUSLICE_SOAK_SEED", "GPUSLICE_SOAK_REPORT"} {
		if v := os.Getenv(k); v != "" && !strings.ContainsAny(v, " \t\n") {
			env = append(env, k+"="+v)
		}
	}
	code, err := debroot.RunTests(debroot.Options{Repo: filepath.Clean(repo), Build: build, Env: env,
		Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		return 1
	}
	return code
}

// slurmPath is the PATH prefix of this run's Slurm programs when it is a
// release built from source (slurmRelease.tree).
var slurmPath string

// useTree puts the source-built release's programs first in PATH, for
// the suite's commands and the jobs' (baseEnv). It returns why the run
// must skip: the release or its plugin not built here (make slurm-src,
// make spank-releases).
func useTree() string {
	build, err := testenv.FindBuildDir()
	if err != nil {
		return err.Error()
	}
	tree := filepath.Join(build, slurm.tree)
	if b, err := os.ReadFile(filepath.Join(tree, "UNAVAILABLE")); err == nil {
		return fmt.Sprintf("Slurm %s was not built: %s", slurm.name, strings.TrimSpace(string(b)))
	}
	for _, p := range []string{filepath.Join(tree, "sbin", "slurmctld"), filepath.Join(build, slurm.plugin)} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("Slurm %s: %s not built (make slurm-src-%s spank-%s)", slurm.name, p, slurm.name, slurm.name)
		}
	}
	slurmPath = slurm.treePath(build)
	os.Setenv("PATH", slurmPath+os.Getenv("PATH"))
	return ""
}

// needCluster returns the running cluster or skips the test: everywhere
// when the suite cannot run here, or a test that cannot pass on this
// run's Slurm release (slurmRelease.skip says why).
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if why, ok := slurm.skip[t.Name()]; ok {
		t.Skipf("not on Slurm %s: %s", slurm.name, why)
	}
	if slurm.core && !coreTests[strings.SplitN(t.Name(), "/", 2)[0]] {
		t.Skipf("Slurm %s runs the core subset (coreTests in slurmconf_test.go)", slurm.name)
	}
	if r, ok := onceTests[strings.SplitN(t.Name(), "/", 2)[0]]; ok && r != slurm.name && os.Getenv("GPUSLICE_SLURM_EVERY") != "1" {
		t.Skipf("runs on Slurm %s only (onceTests in slurmconf_test.go; GPUSLICE_SLURM_EVERY=1 runs it here)", r)
	}
	if !strings.Contains(t.Name(), "/") {
		t.Cleanup(func() { cl.cancelLeftovers(t) })
	}
	return cl
}

// cancelLeftovers cancels the test users' jobs a test leaves behind, so
// that the next test finds the nodes as every test should leave them.
// A test that fails while its srun runs kills that srun with it, and the
// job's allocation then stays until its time limit (InactiveLimit is 0):
// on 26.05 one such job held 2 GiB of a node and failed five later tests.
func (c *cluster) cancelLeftovers(t *testing.T) {
	var names []string
	for _, u := range c.users {
		names = append(names, u.name)
	}
	out, err := c.cmd(nil, "squeue", "-h", "-u", strings.Join(names, ","), "-o", "%i %T").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ids = append(ids, strings.Fields(l)[0])
	}
	t.Logf("%s left jobs behind; cancelled: %s", t.Name(), strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", "))
	_ = c.cmd(nil, "scancel", ids...).Run()
}

// The daemons and clients are the Slurm release the run is for: 22.05 on
// the machine, 24.11 in the Debian 13 root, SchedMD's releases from
// build/slurm.
func TestSlurmRelease(t *testing.T) {
	c := needCluster(t)
	for _, prog := range []string{"slurmctld", "slurmd", "srun", "sbatch"} {
		out, err := c.cmd(nil, prog, "-V").CombinedOutput()
		// Debian's builds say "slurm-wlm 24.11.5".
		f := strings.Fields(string(out))
		if err != nil || len(f) != 2 || !strings.HasPrefix(f[1], slurm.name+".") {
			t.Errorf("%s -V: %q (%v), want Slurm %s", prog, out, err, slurm.name)
		}
	}
	deb, err := os.ReadFile("/etc/debian_version")
	want := slurm.debian
	if err != nil || !strings.HasPrefix(string(deb), want+".") {
		t.Errorf("/etc/debian_version %q (%v), want Debian %s", deb, err, want)
	}
	if debroot.Inside() != slurm.inRoot {
		t.Errorf("running in the Debian 13 root: %v, want %v", debroot.Inside(), slurm.inRoot)
	}
}

func (c *cluster) dumpLogs(w *os.File) {
	if c == nil || c.dir == "" {
		return
	}
	files := []string{"slurmctld.log", "slurmctld.out", "munged.out", "slurmdbd.log", "slurmdbd.out", "mariadb.log"}
	for _, n := range c.nodes {
		files = append(files, "holder-"+n.Name+".out", "slurmd-"+n.Name+".log", "slurmd-"+n.Name+".out", "gpusliced-"+n.Name+".out")
	}
	for _, f := range files {
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

func (n *node) client() *client.Client { return client.New(n.admSock) }

func (n *node) gpus() ([]client.GPU, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := n.client()
	defer cl.Close()
	return cl.GPUs(ctx)
}

func (n *node) session(id string) (*client.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := n.client()
	defer cl.Close()
	return cl.GetSession(ctx, id)
}

func (n *node) sessions() ([]client.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := n.client()
	defer cl.Close()
	return cl.ListSessions(ctx)
}

// session finds job id's session on whichever node holds it.
func (c *cluster) session(id string) (*client.Session, error) {
	var last error = client.ErrNotFound
	for _, n := range c.nodes {
		s, err := n.session(id)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, client.ErrNotFound) {
			last = err
		}
	}
	return nil, last
}

// nodeStates maps each node to sinfo's %T ("idle", "mixed", "allocated",
// "drained", ...).
func (c *cluster) nodeStates() (map[string]string, error) {
	out, err := c.cmd(nil, "sinfo", "-h", "-N", "-o", "%N %T").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("sinfo: %w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("sinfo: %w", err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			m[f[0]] = f[1]
		}
	}
	return m, nil
}

// drained returns the nodes sinfo shows drained, draining, down or failing
// (a node slow to answer, "idle*" under load, is none of these).
func (c *cluster) drained() ([]string, error) {
	m, err := c.nodeStates()
	if err != nil {
		return nil, err
	}
	var bad []string
	for n, st := range m {
		if strings.HasPrefix(st, "drain") || strings.HasPrefix(st, "down") || strings.HasPrefix(st, "fail") {
			bad = append(bad, n+"="+st)
		}
	}
	sort.Strings(bad)
	return bad, nil
}

// waitNodeState waits until every node is in state want.
func (c *cluster) waitNodeState(want string, d time.Duration) error {
	return waitFor(d, func() error {
		m, err := c.nodeStates()
		if err != nil {
			return err
		}
		if len(m) != len(c.nodes) {
			return fmt.Errorf("sinfo shows %v", m)
		}
		for n, st := range m {
			if st != want {
				return fmt.Errorf("node %s is %q, want %q", n, st, want)
			}
		}
		return nil
	})
}

// nodeState is node n's state.
func (c *cluster) nodeState(n string) (string, error) {
	m, err := c.nodeStates()
	if err != nil {
		return "", err
	}
	return m[n], nil
}

// job returns scontrol's fields of a job (one-line form).
func (c *cluster) job(id string) (map[string]string, error) {
	out, err := c.cmd(nil, "scontrol", "-o", "show", "job", id).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("scontrol show job %s: %v: %s", id, err, out)
	}
	// An array's first task shares the array's id: scontrol then shows
	// every task, one line each; keep the line of the job asked for.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	line := lines[0]
	for _, l := range lines {
		if strings.HasPrefix(l, "JobId="+id+" ") {
			line = l
		}
	}
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, seen := m[k]; !seen {
				m[k] = v
			}
		}
	}
	return m, nil
}

// jobNodes lists the nodes job id ran (or runs) on.
func (c *cluster) jobNodes(t *testing.T, id string) []*node {
	t.Helper()
	j, err := c.job(id)
	if err != nil {
		t.Fatal(err)
	}
	list := j["NodeList"]
	expanded, err := c.cmd(nil, "scontrol", "show", "hostnames", list).Output()
	if err != nil || list == "" {
		t.Fatalf("job %s: no node list (%q): %v", id, list, err)
	}
	var ns []*node
	for _, name := range strings.Fields(string(expanded)) {
		if n := c.nodeByName(name); n != nil {
			ns = append(ns, n)
		}
	}
	if len(ns) == 0 {
		t.Fatalf("job %s ran on %q, not a test node", id, list)
	}
	return ns
}

// jobNode is the one node job id ran on.
func (c *cluster) jobNode(t *testing.T, id string) *node {
	t.Helper()
	ns := c.jobNodes(t, id)
	if len(ns) != 1 {
		t.Fatalf("job %s ran on %d nodes, want 1", id, len(ns))
	}
	return ns[0]
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

// assertReleased checks what must hold after every job, on the node(s) it
// ran on: the session is gone, the GPUs have no committed or used bytes
// left, no node is drained, and `gpuslice report <id>` shows the job's
// figures. It returns the report's text (of the first node).
func (c *cluster) assertReleased(t *testing.T, id string) string {
	t.Helper()
	var text string
	for i, n := range c.jobNodes(t, id) {
		if err := waitFor(30*time.Second, func() error {
			_, err := n.session(id)
			if errors.Is(err, client.ErrNotFound) {
				return nil
			}
			return fmt.Errorf("session %s on %s still exists (err %v)", id, n.Name, err)
		}); err != nil {
			t.Fatal(err)
		}
		if err := n.waitIdleGPUs(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rep := run(ctx, n.onNode(nil, c.bin("gpuslice"), "--admin-socket", c.admSock, "report", id))
		cancel()
		if rep.code != 0 {
			t.Fatalf("gpuslice report %s on %s: %s", id, n.Name, rep)
		}
		if !strings.Contains(rep.stdout, "PEAK") || !strings.Contains(rep.stdout, "FINAL USED") {
			t.Fatalf("gpuslice report %s on %s shows no peak and final usage:\n%s", id, n.Name, rep.stdout)
		}
		if i == 0 {
			text = rep.stdout
		}
	}
	if bad, err := c.drained(); err != nil || len(bad) > 0 {
		t.Fatalf("after job %s: drained nodes %v (%v)", id, bad, err)
	}
	return text
}

// waitIdleGPUs waits until no session holds or uses any of n's GPUs.
func (n *node) waitIdleGPUs(d time.Duration) error {
	return waitFor(d, func() error {
		gpus, err := n.gpus()
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if g.CommittedBytes != 0 || g.UsedBytes != 0 || g.Sessions != 0 {
				return fmt.Errorf("%s GPU %s: committed %d, used %d, sessions %d", n.Name, g.UUID, g.CommittedBytes, g.UsedBytes, g.Sessions)
			}
		}
		return nil
	})
}

// history is the report of a released session as `gpuslice report --json`
// prints it on the node the job ran on.
func (c *cluster) history(t *testing.T, id string) *client.Report {
	t.Helper()
	return c.jobNode(t, id).history(t, id)
}

func (n *node) history(t *testing.T, id string) *client.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := run(ctx, n.onNode(nil, n.c.bin("gpuslice"), "--admin-socket", n.c.admSock, "report", "--json", id))
	if r.code != 0 {
		t.Fatalf("gpuslice report --json %s on %s: %s", id, n.Name, r)
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

// prologEnv is the environment the Prolog of job id got on node n.
func (c *cluster) prologEnv(t *testing.T, id string, n *node) string {
	t.Helper()
	return readFile(t, c.prologEnvPath(id, n))
}

// prologEnvPath is where the cluster's Prolog wrapper writes it.
func (c *cluster) prologEnvPath(id string, n *node) string {
	return c.path("log", "prolog-"+id+"-"+n.Name+".env")
}
