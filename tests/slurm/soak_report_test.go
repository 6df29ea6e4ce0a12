package slurm

// The soak's node states, gpusliced's process figures, the hostile
// user's GPU time, the checks at the end and the report.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// gpusliceReasons are the drain reasons gpuslice can be the cause of.
var gpusliceReasons = regexp.MustCompile(`(?i)prolog|epilog|gpuslice|kill task failed|spank`)

// checkNodes: no node drained or failed for a reason of gpuslice's. A
// node a fault took out is put back in service (scontrol resume) once
// the fault is over.
func (iv *invariants) checkNodes(now time.Time) {
	c := iv.s.c
	out, err := c.cmd(nil, "sinfo", "-h", "-N", "-o", "%N|%T|%E").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(l, "|", 3)
		if len(f) != 3 {
			continue
		}
		name, st, reason := f[0], f[1], f[2]
		out := strings.Contains(st, "drain") || strings.HasPrefix(st, "down") || strings.HasPrefix(st, "fail")
		if !out {
			delete(iv.drainSeen, name)
			iv.check("node-not-drained", false, "")
			continue
		}
		bad := gpusliceReasons.MatchString(reason)
		first := iv.drainSeen[name] == ""
		iv.drainSeen[name] = st + ": " + reason
		iv.check("node-not-drained", bad && first, fmt.Sprintf("%s %s: %s", name, st, reason))
		if first && !bad {
			iv.note("node-not-drained", fmt.Sprintf("%s %s (%s) after a fault, resumed", name, st, reason))
		}
		if iv.quiet(name, resumeAfterUp) {
			_ = c.cmd(nil, "scontrol", "update", "nodename="+name, "state=resume").Run()
		}
	}
}

// procSeries are one gpusliced's process figures: the first and the last
// sample taken while its node was idle, and the most seen.
type procSeries struct {
	pid               int
	first, last, most map[string]float64
	samples           int
}

var procMetrics = []string{"process_resident_memory_bytes", "process_open_fds", "go_goroutines"}

// metricsOf reads a node's gpusliced metrics (its admin socket).
func (n *node) metricsOf() (map[string]float64, error) {
	// no connection kept: a second's sample each time, none left open
	// in gpusliced (its fds and goroutines are what is measured)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.admSock)
		}}}
	resp, err := hc.Get("http://gpusliced/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, name := range procMetrics {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				m[name], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return m, sc.Err()
}

// sampleMetrics samples the node's gpusliced: each incarnation (pid) is a
// series of its own; idle samples are those of a node idle 15 s.
func (iv *invariants) sampleMetrics(n *node) {
	c := iv.s.c
	c.mu.Lock()
	p := c.procs["gpusliced-"+n.Name]
	c.mu.Unlock()
	if p == nil {
		return
	}
	m, err := n.metricsOf()
	if err != nil || len(m) != len(procMetrics) {
		return
	}
	ps := iv.metrics[n.Name]
	if ps == nil || ps.pid != p.cmd.Process.Pid {
		ps = &procSeries{pid: p.cmd.Process.Pid, most: map[string]float64{}}
		iv.metrics[n.Name] = ps
	}
	ps.samples++
	for k, v := range m {
		if v > ps.most[k] {
			ps.most[k] = v
		}
	}
	iv.check("gpusliced-flat", m["go_goroutines"] > 10000 || m["process_open_fds"] > 10000,
		fmt.Sprintf("%s: gpusliced has %v", n.Name, m))
	if since, ok := iv.idle[n.Name]; ok && time.Since(since) >= idleSettle {
		if ps.first == nil {
			ps.first = m
		}
		ps.last = m
	}
}

// hostileShare measures the hostile job's part of its GPU's time over a
// minute (NVML's per-process samples, fc_utilwatch) beside the honest
// neighbour: at most its share of the two weights + 5 points.
func (s *soak) hostileShare(n *node, gpu int, cheat, fair string, e soakEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := n.onNode(nil, filepath.Join(s.c.build, "tests", "fakecuda", "fc_utilwatch"), "60")
	cmd.Env = append(cmd.Env, "FC_UTILWATCH_GPU="+strconv.Itoa(gpu))
	from := time.Now()
	pids := map[int]string{}
	for _, id := range []string{cheat, fair} {
		for _, p := range jobPids(id) {
			pids[p] = id
		}
	}
	r := run(ctx, cmd)
	for _, id := range []string{cheat, fair} {
		for _, p := range jobPids(id) {
			pids[p] = id
		}
	}
	var total, mine float64
	for _, ev := range events(r.stdout) {
		if ev["event"] != "busy" {
			continue
		}
		pid, _ := strconv.Atoi(ev["pid"])
		ms, _ := strconv.ParseFloat(ev["ms"], 64)
		total += ms
		if pids[pid] == cheat || jobOf(pid) == cheat {
			mine += ms
		}
	}
	if total == 0 {
		s.inv.note("hostile-gpu-time", fmt.Sprintf("job %s: no GPU time measured on %s GPU %d (fc_utilwatch exit %d: %s)",
			cheat, n.Name, gpu, r.code, strings.TrimSpace(r.stderr)))
		return
	}
	share := 100 * float64(e.Pct) / float64(e.Pct+90)
	got := 100 * mine / total
	if why := s.inv.uncontended(n.Name, from, len(jobPids(fair)) > 0); why != "" {
		s.logf("paced-bypass: job %s got %.1f%% of %s GPU %d over 60 s: not a measure of its share: %s", cheat, got, n.Name, gpu, why)
		s.inv.note("hostile-gpu-time", fmt.Sprintf("job %s (weight %d): %.1f%% over a minute not counted: %s", cheat, e.Pct, got, why))
		return
	}
	s.logf("paced-bypass: job %s (weight %d, a launch every %d ms) got %.1f%% of %s GPU %d over 60 s beside job %s (share %.1f%%)",
		cheat, e.Pct, e.Pace, got, n.Name, gpu, fair, share)
	s.inv.mu.Lock()
	s.inv.hostile = append(s.inv.hostile, fmt.Sprintf("weight %d pace %d ms: %.1f%% (share %.1f%%)", e.Pct, e.Pace, got, share))
	s.inv.mu.Unlock()
	s.inv.check("hostile-gpu-time", got > share+5, fmt.Sprintf("job %s of weight %d, launching past the gate every %d ms, got %.1f%% of the GPU over 60 s; its share is %.1f%%",
		cheat, e.Pct, e.Pace, got, share))
}

// uncontended says why a minute of the paced bypass beside its neighbour,
// from from until now, does not measure its share ("" when it does): a
// fault that moves the node's GPU time (movesGPUTime: a job's processes
// killed, gpusliced killed, the node rebooted) began or was in progress
// within it (seed 60's 2-hour run killed the neighbour, job 661, 17 s
// into the minute), or the neighbour no longer runs. Alone on the GPU the
// bypass may take what is idle: the controller holds a session back only
// against another's demand. The cluster's faults and the node's other ones
// (slurmctld, slurmdbd, slurmd restarted or stopped, the state directory
// full) leave both jobs and gpusliced running: those minutes count (the
// 2-hour run on 0afd83a left 10 of its 22 minutes out for the cluster's
// faults, slurmdbd stopped or slurmctld restarted).
func (iv *invariants) uncontended(node string, from time.Time, neighbourRuns bool) string {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	k := gpuTimeKey(node)
	if iv.active[k] > 0 {
		return "a fault that moves GPU time in progress on " + node
	}
	if iv.back[k].After(from) {
		return "a fault that moves GPU time on " + node + " within the minute"
	}
	if !neighbourRuns {
		return "the neighbour job no longer runs"
	}
	return ""
}

// final runs the checks at the end, the cluster idle.
func (iv *invariants) final() {
	s := iv.s
	c := s.c
	// fakecuda's memory back to zero and nothing frozen, on every node
	for _, n := range c.nodes {
		var v nvmlView
		err := waitFor(time.Minute, func() error {
			var err error
			if v, err = n.nvml(); err != nil {
				return err
			}
			for idx, u := range v.used {
				if u > 0 {
					return fmt.Errorf("GPU %d: %d bytes in use", idx, u)
				}
			}
			return nil
		})
		iv.check("fakecuda-idle-zero", err != nil, fmt.Sprintf("%s at the end: %v (%v)", n.Name, err, v.procs))
		frozen := 0
		_ = filepath.WalkDir(n.cg, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && frozenFile(p) {
				frozen++
				s.logf("frozen at the end: %s", p)
			}
			return nil
		})
		iv.check("no-frozen-cgroup", frozen > 0, fmt.Sprintf("%s: %d cgroups frozen at the end", n.Name, frozen))
	}
	// gpusliced flat: idle at the end against idle at its start
	time.Sleep(idleSettle + 2*time.Second)
	for _, n := range c.nodes {
		iv.idle[n.Name] = time.Now().Add(-idleSettle)
		iv.sampleMetrics(n)
		ps := iv.metrics[n.Name]
		if ps == nil || ps.first == nil || ps.last == nil {
			iv.note("gpusliced-flat", n.Name+": no idle samples")
			continue
		}
		rss := ps.last["process_resident_memory_bytes"] - ps.first["process_resident_memory_bytes"]
		fds := ps.last["process_open_fds"] - ps.first["process_open_fds"]
		gor := ps.last["go_goroutines"] - ps.first["go_goroutines"]
		fig := fmt.Sprintf("%s (pid %d, %d samples): RSS %+.1f MiB, fds %+.0f, goroutines %+.0f (idle at the end vs at its start; most %.1f MiB, %.0f fds, %.0f goroutines)",
			n.Name, ps.pid, ps.samples, rss/float64(MiB), fds, gor, ps.most["process_resident_memory_bytes"]/float64(MiB),
			ps.most["process_open_fds"], ps.most["go_goroutines"])
		iv.mu.Lock()
		iv.flat = append(iv.flat, fig)
		iv.mu.Unlock()
		iv.check("gpusliced-flat", rss > 16*float64(MiB) || fds > 10 || gor > 10, fig)
	}
	iv.checkAccounting()
}

// report is the run's report: what ran, what broke, every invariant.
func (s *soak) report(hash string, took time.Duration) string {
	iv := s.inv
	var b strings.Builder
	fmt.Fprintf(&b, "gpuslice soak report\n")
	fmt.Fprintf(&b, "seed %d, duration %v (ran %v), Slurm %s, %d nodes x 2 fake GPUs of 16 GiB, cgroup %v, schedule %s\n",
		s.seed, s.d, took.Round(time.Second), slurm.name, len(s.c.nodes), tracking.cgroup, hash)
	byKind := map[string]int{}
	users := map[string]int{}
	for _, j := range s.jobs {
		byKind[j.kind]++
		users[j.user]++
	}
	fmt.Fprintf(&b, "jobs: %d submitted (%s; by user %s), %d refused at submission (%s), %d steps\n",
		len(s.jobs), counts(byKind), counts(users), sum(s.submitFa), counts(s.submitFa), iv.steps)
	fmt.Fprintf(&b, "attacks: %d (%s)\n", sum(s.attacks), counts(s.attacks))
	fmt.Fprintf(&b, "faults: %d (%s)\n", sum(s.faults), counts(s.faults))
	fmt.Fprintf(&b, "invariants (checks, violations):\n")
	total := 0
	for _, n := range invariantNames {
		c := iv.c[n.name]
		total += c.violations
		fmt.Fprintf(&b, "  %-22s %8d checks %4d violations  %s\n", n.name, c.checks, c.violations, n.what)
		for _, note := range c.notes {
			fmt.Fprintf(&b, "      %s\n", note)
		}
	}
	for _, h := range iv.hostile {
		fmt.Fprintf(&b, "hostile GPU time: %s\n", h)
	}
	for _, f := range iv.flat {
		fmt.Fprintf(&b, "gpusliced: %s\n", f)
	}
	fmt.Fprintf(&b, "violations: %d\n", total)
	return b.String()
}

func counts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// frozenFile: cgroup dir p is asked frozen (cgroup.freeze is 1).
func frozenFile(p string) bool {
	b, err := os.ReadFile(filepath.Join(p, "cgroup.freeze"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
