package slurm

// The soak's invariants, checked every second (this file) and at the end
// (soak_report_test.go). Each is a line of the report with its count of
// checks and of violations; a violation's details go to the soak's log.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/hostlist"
)

// The invariants, in the report's order.
var invariantNames = []struct{ name, what string }{
	{"gpu-physical-memory", "no GPU over its physical memory (NVML and gpusliced)"},
	{"quota-audit-window", "no job over its quota (the driver's figures) longer than the audit window (5 s)"},
	{"hostile-gpu-time", "the hostile user's GPU time within its share + 5 points over a minute"},
	{"node-not-drained", "no node drained or failed by gpuslice (Prolog, Epilog, kill task failed)"},
	{"session-released", "every session released <= 10 s after its job ends (or its node's daemons are back)"},
	{"figures-in-accounting", "every job's figures in sacct's AdminComment by the end"},
	{"no-frozen-cgroup", "no frozen cgroup of a job that is no longer running (10 s), none at the end"},
	{"gpusliced-flat", "gpusliced's RSS, fds and goroutines flat (metrics, idle at the end vs idle at its start)"},
	{"fakecuda-idle-zero", "fakecuda's device memory back to zero when the node is idle (15 s)"},
	{"faults-recovered", "every fault undone: the daemon it stopped back"},
}

const (
	auditWindow   = 5 * time.Second
	releaseBound  = 10 * time.Second
	frozenBound   = 10 * time.Second
	idleSettle    = 15 * time.Second
	drainSettle   = 20 * time.Second
	resumeAfterUp = 20 * time.Second
)

type invCount struct {
	checks, violations int
	notes              []string
}

type invariants struct {
	s  *soak
	mu sync.Mutex
	c  map[string]*invCount

	state     map[string]string    // job id -> squeue state
	ended     map[string]time.Time // job id -> first seen ended
	resolved  map[string]bool      // job id: session-released decided
	sessions  map[string]bool      // job ids gpusliced had a session for
	over      map[string]time.Time // node/job/gpu -> over its quota since
	counted   map[string]bool      // an episode already counted as a violation
	active    map[string]int       // node ("*": all) -> faults in progress
	back      map[string]time.Time // node ("*": all) -> last fault's end
	idle      map[string]time.Time // node -> idle since
	frozen    map[string]time.Time // cgroup dir -> seen frozen since
	metrics   map[string]*procSeries
	drainSeen map[string]string      // node -> reason while it is out
	hostile   []string               // the paced-bypass measures
	flat      []string               // gpusliced's figures at the end
	steps     int                    // job steps sacct lists at the end
	running   func(name string) bool // a daemon of the cluster runs (cluster.running)
	holding   map[string]int         // daemon -> faults in progress that stopped it
}

func newInvariants(s *soak) *invariants {
	iv := &invariants{s: s, c: map[string]*invCount{}, state: map[string]string{}, ended: map[string]time.Time{},
		resolved: map[string]bool{}, sessions: map[string]bool{}, over: map[string]time.Time{}, counted: map[string]bool{},
		active: map[string]int{}, back: map[string]time.Time{}, idle: map[string]time.Time{}, frozen: map[string]time.Time{},
		metrics: map[string]*procSeries{}, drainSeen: map[string]string{}, holding: map[string]int{}}
	if s != nil && s.c != nil {
		iv.running = s.c.running
	}
	for _, n := range invariantNames {
		iv.c[n.name] = &invCount{}
	}
	return iv
}

// check counts one check of name; bad counts a violation, with why.
func (iv *invariants) check(name string, bad bool, why string) {
	iv.mu.Lock()
	c := iv.c[name]
	c.checks++
	if bad {
		c.violations++
		if len(c.notes) < 20 {
			c.notes = append(c.notes, why)
		}
	}
	iv.mu.Unlock()
	if bad {
		iv.s.logf("VIOLATION %s: %s", name, why)
	}
}

// note records something the report should say about name.
func (iv *invariants) note(name, why string) {
	iv.mu.Lock()
	if c := iv.c[name]; c != nil && len(c.notes) < 20 {
		c.notes = append(c.notes, why)
	}
	iv.mu.Unlock()
	iv.s.logf("note %s: %s", name, why)
}

func (iv *invariants) violations() int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	n := 0
	for _, c := range iv.c {
		n += c.violations
	}
	return n
}

// quiet: no fault on node in progress, none ended within d.
func (iv *invariants) quiet(node string, d time.Duration) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for _, k := range []string{node, "*"} {
		if iv.active[k] > 0 || time.Since(iv.back[k]) < d {
			return false
		}
	}
	return true
}

// backAt is when node's last fault (or the cluster's) ended.
func (iv *invariants) backAt(node string) time.Time {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	t := iv.back[node]
	if iv.back["*"].After(t) {
		t = iv.back["*"]
	}
	return t
}

func (iv *invariants) loop(stop chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			iv.tick()
		}
	}
}

var runningStates = map[string]bool{"RUNNING": true, "COMPLETING": true, "CONFIGURING": true, "SUSPENDED": true,
	"STAGE_OUT": true, "SIGNALING": true, "RESIZING": true}

// tick is one second's checks.
func (iv *invariants) tick() {
	c := iv.s.c
	now := time.Now()
	busy := map[string]bool{} // nodes with a job
	if out, err := c.cmd(nil, "squeue", "-h", "-t", "all", "-o", "%A|%T|%N").Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(l, "|")
			if len(f) != 3 {
				continue
			}
			iv.state[f[0]] = f[1]
			if runningStates[f[1]] {
				names, _ := hostlist.Expand(f[2])
				for _, n := range names {
					busy[n] = true
				}
			} else if f[1] != "PENDING" && iv.ended[f[0]].IsZero() {
				iv.ended[f[0]] = now
			}
		}
	} else {
		busy = nil // slurmctld away: nothing is known of the jobs
	}
	held := map[string][]string{} // job id -> the nodes with its session
	partial := false              // a node's sessions unknown this second
	for _, n := range c.nodes {
		if !c.running("gpusliced-" + n.Name) {
			iv.forgetOver(n.Name)
			partial = true
			continue
		}
		ss, err := n.sessions()
		if err != nil {
			partial = true
			continue
		}
		for _, s := range ss {
			held[s.ID] = append(held[s.ID], n.Name)
			iv.sessions[s.ID] = true
		}
		iv.checkMemory(n, ss, now)
		iv.sampleMetrics(n)
		if busy != nil {
			iv.checkIdle(n, busy[n.Name] || len(ss) > 0, now)
		}
		iv.checkFrozen(n, now)
	}
	if busy != nil && !partial {
		iv.checkReleased(held, now)
	}
	iv.checkNodes(now)
}

func (iv *invariants) forgetOver(node string) {
	for k := range iv.over {
		if strings.HasPrefix(k, node+"/") {
			delete(iv.over, k)
		}
	}
}

// nvmlView is what nvml_query shows on a node, as root.
type nvmlView struct {
	total, used map[int]uint64
	procs       map[int]map[int]uint64 // gpu index -> pid -> bytes
}

func (n *node) nvml() (nvmlView, error) {
	v := nvmlView{total: map[int]uint64{}, used: map[int]uint64{}, procs: map[int]map[int]uint64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := run(ctx, n.onNode(nil, filepath.Join(n.c.build, "examples", "nvml_query")))
	if r.code != 0 {
		return v, fmt.Errorf("nvml_query on %s: %s", n.Name, r)
	}
	for _, e := range events(r.stdout) {
		idx, _ := strconv.Atoi(e["index"])
		switch e["event"] {
		case "memory":
			v.total[idx], _ = strconv.ParseUint(e["total"], 10, 64)
			v.used[idx], _ = strconv.ParseUint(e["used"], 10, 64)
		case "process":
			pid, _ := strconv.Atoi(e["pid"])
			b, _ := strconv.ParseUint(e["used"], 10, 64)
			if v.procs[idx] == nil {
				v.procs[idx] = map[int]uint64{}
			}
			v.procs[idx][pid] += b
		}
	}
	return v, nil
}

var reJobCgroup = regexp.MustCompile(`/job_(\d+)/`)

// jobOf is the job whose cgroup holds pid ("" for none).
func jobOf(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if m := reJobCgroup.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// checkMemory: no GPU over its memory, no job over its quota for longer
// than the audit window, by the driver's figures (NVML as root) against
// the sessions' limits.
func (iv *invariants) checkMemory(n *node, ss []client.Session, now time.Time) {
	v, err := n.nvml()
	if err != nil {
		return
	}
	for idx, total := range v.total {
		iv.check("gpu-physical-memory", v.used[idx] > total,
			fmt.Sprintf("%s GPU %d: NVML used %d of %d", n.Name, idx, v.used[idx], total))
	}
	if gpus, err := n.gpus(); err == nil {
		for _, g := range gpus {
			iv.check("gpu-physical-memory", g.UsedBytes > g.PhysicalBytes,
				fmt.Sprintf("%s GPU %d: gpusliced used %d of %d", n.Name, g.Index, g.UsedBytes, g.PhysicalBytes))
		}
	}
	limits := map[string]uint64{} // job/gpu -> limit
	for _, s := range ss {
		for _, g := range s.GPUs {
			limits[fmt.Sprintf("%s/%d", s.ID, g.Index)] = g.LimitBytes
		}
	}
	byJob := map[string]uint64{}
	for idx, procs := range v.procs {
		for pid, b := range procs {
			if j := jobOf(pid); j != "" {
				byJob[fmt.Sprintf("%s/%d", j, idx)] += b
			}
		}
	}
	from := iv.backAt(n.Name)
	for k, used := range byJob {
		lim, ok := limits[k]
		if !ok {
			continue // no session (yet, or any more)
		}
		key := n.Name + "/" + k
		if used <= lim {
			delete(iv.over, key)
			iv.check("quota-audit-window", false, "")
			continue
		}
		since, seen := iv.over[key]
		if !seen {
			since = now
			iv.over[key] = now
		}
		if from.After(since) {
			since = from
		}
		long := now.Sub(since) > auditWindow && !iv.counted["over/"+key]
		if long {
			iv.counted["over/"+key] = true
		}
		iv.check("quota-audit-window", long, fmt.Sprintf("%s job/GPU %s: %d bytes over a quota of %d for %v",
			n.Name, k, used, lim, now.Sub(since).Round(time.Second)))
	}
}

// checkIdle: a node with no job and no session, and no fault lately, has
// no device memory in use.
func (iv *invariants) checkIdle(n *node, busy bool, now time.Time) {
	if busy || !iv.quiet(n.Name, idleSettle) {
		delete(iv.idle, n.Name)
		return
	}
	since, ok := iv.idle[n.Name]
	if !ok {
		iv.idle[n.Name] = now
		return
	}
	if now.Sub(since) < idleSettle {
		return
	}
	v, err := n.nvml()
	if err != nil {
		return
	}
	var used uint64
	for _, u := range v.used {
		used += u
	}
	key := "idle/" + n.Name + "/" + since.String()
	bad := used > 0 && !iv.counted[key]
	if bad {
		iv.counted[key] = true
	}
	iv.check("fakecuda-idle-zero", bad, fmt.Sprintf("%s idle for %v: NVML shows %d bytes in use (%v)",
		n.Name, now.Sub(since).Round(time.Second), used, v.procs))
}

// checkFrozen: a job's cgroup that gpusliced froze is thawed once the job
// no longer runs.
func (iv *invariants) checkFrozen(n *node, now time.Time) {
	if n.cg == "" {
		return
	}
	_ = filepath.WalkDir(n.cg, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.freeze"))
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			delete(iv.frozen, p)
			return nil
		}
		m := reJobCgroup.FindStringSubmatch(p + "/")
		if m == nil || runningStates[iv.state[m[1]]] {
			delete(iv.frozen, p)
			return nil
		}
		since, ok := iv.frozen[p]
		if !ok {
			iv.frozen[p] = now
			since = now
		}
		long := now.Sub(since) > frozenBound && !iv.counted["frozen/"+p]
		if long {
			iv.counted["frozen/"+p] = true
		}
		iv.check("no-frozen-cgroup", long, fmt.Sprintf("%s: %s frozen %v after job %s ended (%s)",
			n.Name, p, now.Sub(since).Round(time.Second), m[1], iv.state[m[1]]))
		return nil
	})
}

// checkReleased: a job that ended has no session left 10 s later (from
// its node's daemons' return when a fault had them away).
func (iv *invariants) checkReleased(held map[string][]string, now time.Time) {
	for id, end := range iv.ended {
		if iv.resolved[id] {
			continue
		}
		if len(held[id]) == 0 {
			iv.resolved[id] = true
			iv.check("session-released", false, "")
			continue
		}
		from := end
		for _, n := range held[id] {
			if b := iv.backAt(n); b.After(from) {
				from = b
			}
		}
		if now.Sub(from) > releaseBound {
			iv.resolved[id] = true
			iv.check("session-released", true, fmt.Sprintf("job %s (%s) ended %v ago, its session is still on %v",
				id, iv.state[id], now.Sub(end).Round(time.Second), held[id]))
		}
	}
}
