package slurm

// The soak's accounting invariant: every job's figures in sacct by the
// end, from every node that held the job's session.
//
// A node reports a job's figures from its Epilog's release of the
// session (daemon/admin/jobend.go); a node that never held the session
// has none to report. That is a job Slurm started on a node whose slurmd
// was gone (a node "rebooted" in the seconds before slurmctld noticed):
// its Prolog never ran there, no session was made, and the job failed at
// launch (seed 60's job 109, 35-min run). Which nodes held a session is
// gpusliced's own word: its "session created" log line on each node.

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/hostlist"
)

// checkAccounting: every job that started has gpuslice's part of its
// AdminComment within figuresBound of the end, with every node that held
// its session among those reported.
func (iv *invariants) checkAccounting() {
	s := iv.s
	held := iv.heldSessions()
	since := s.start.Add(-time.Minute).Format("2006-01-02T15:04:05")
	var missing, none []string
	var expected int
	ends := map[string]time.Time{} // JobIDRaw -> its End, for explainNoSession
	_ = waitFor(figuresBound+time.Minute, func() error {
		out, err := s.c.cmd(nil, "sacct", "-a", "-X", "-n", "-P", "-S", since, "-o", "JobIDRaw,State,NodeList,Start,End,AdminComment").Output()
		if err != nil {
			return err
		}
		missing, expected, none = nil, 0, nil
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.SplitN(l, "|", 6)
			if len(f) != 6 {
				continue
			}
			if end, err := time.ParseInLocation("2006-01-02T15:04:05", f[4], time.Local); err == nil {
				ends[f[0]] = end
			}
			f = append(f[:4], f[5]) // JobIDRaw, State, NodeList, Start, AdminComment
			if f[3] == "Unknown" || f[3] == "None" || f[2] == "None assigned" || f[2] == "" {
				continue
			}
			if len(held[f[0]]) == 0 {
				// no node made its session: nothing to report
				none = append(none, f[0]+" "+f[1]+" on "+f[2])
				continue
			}
			expected++
			if why := figuresWhole(f[2], f[4], held[f[0]]); why != "" {
				missing = append(missing, fmt.Sprintf("job %s (%s on %s): %s", f[0], f[1], f[2], why))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d jobs without their figures", len(missing))
		}
		return nil
	})
	if len(none) > 0 {
		note, lines := explainNoSession(none, iv.refusals(), ends)
		iv.note("figures-in-accounting", note)
		s.logf("jobs started without a session on any node:\n  %s", strings.Join(lines, "\n  "))
	}
	for i := 0; i < expected; i++ {
		bad := i < len(missing)
		why := ""
		if bad {
			why = missing[i]
		}
		iv.check("figures-in-accounting", bad, why)
	}
	out, err := s.c.cmd(nil, "sacct", "-a", "-n", "-P", "-S", since, "-o", "JobID").CombinedOutput()
	if err != nil {
		s.logf("sacct of the steps: %v: %s", err, out)
	}
	for _, l := range strings.Fields(string(out)) {
		if strings.Contains(l, ".") {
			iv.steps++
		}
	}
}

// heldSessions is, for each job, the nodes whose gpusliced made its
// session, read from each node's gpusliced log (every start's, appended).
func (iv *invariants) heldSessions() map[string]map[string]bool {
	held := map[string]map[string]bool{}
	for _, n := range iv.s.c.nodes {
		f, err := os.Open(iv.s.c.path("log", "gpusliced-"+n.Name+".out"))
		if err != nil {
			iv.note("figures-in-accounting", fmt.Sprintf("%s: gpusliced's log: %v", n.Name, err))
			continue
		}
		for id := range sessionsCreated(f) {
			if held[id] == nil {
				held[id] = map[string]bool{}
			}
			held[id][n.Name] = true
		}
		f.Close()
	}
	return held
}

var reSessionCreated = regexp.MustCompile(`msg="session created" session=(\S+)`)

// sessionsCreated: the session ids a gpusliced log says were made.
func sessionsCreated(f *os.File) map[string]bool {
	ids := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := reSessionCreated.FindStringSubmatch(sc.Text()); m != nil {
			ids[strings.Trim(m[1], `"`)] = true
		}
	}
	return ids
}

var reNodesField = regexp.MustCompile(`(?:^|;)nodes=(\d+)`)
var reReported = regexp.MustCompile(`(?:^|;)reported=([0-9,-]*)`)

// figuresWhole says what gpuslice's AdminComment lacks ("" when whole):
// the record, its node count, and every node of held (those that made
// the job's session) among those reported (indices into nodeList).
func figuresWhole(nodeList, comment string, held map[string]bool) string {
	if !strings.Contains(comment, "gpuslice:") {
		return fmt.Sprintf("no gpuslice figures (AdminComment %q)", comment)
	}
	names, _ := hostlist.Expand(nodeList)
	m := reNodesField.FindStringSubmatch(comment)
	r := reReported.FindStringSubmatch(comment)
	if m == nil || r == nil {
		return fmt.Sprintf("AdminComment %q", comment)
	}
	if want, _ := strconv.Atoi(m[1]); want != len(names) {
		return fmt.Sprintf("nodes=%d for a job on %d nodes (AdminComment %q)", want, len(names), comment)
	}
	reported := map[int]bool{}
	for _, part := range strings.Split(r[1], ",") {
		if part == "" {
			continue
		}
		a, b, isRange := strings.Cut(part, "-")
		x, _ := strconv.Atoi(a)
		y := x
		if isRange {
			y, _ = strconv.Atoi(b)
		}
		for i := x; i <= y; i++ {
			reported[i] = true
		}
	}
	var lost []string
	for i, name := range names {
		if held[name] && !reported[i] {
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		return fmt.Sprintf("%s held the session and did not report (AdminComment %q)", strings.Join(lost, ","), comment)
	}
	return ""
}

// Seed 60's job 109: Slurm started it on tn[1-2] while tn2 was down;
// only tn1 made its session, and only tn1 reported. That record is
// whole; the same record for a job whose session both nodes made is not.
func TestFiguresWholeNodesThatHeldTheJob(t *testing.T) {
	const job109 = "gpuslice:v2;quota_mib=256;nodes=2;reported=0;peak_mib=128;peak_on=tn1/gpu-0fb77ae2-cd90-4869-996b-d2ca1bdef09b;denied=0"
	cases := []struct {
		list, comment string
		held          []string
		whole         bool
	}{
		{"tn[1-2]", job109, []string{"tn1"}, true},
		{"tn[1-2]", job109, []string{"tn1", "tn2"}, false},
		{"tn[1-2]", job109, []string{"tn2"}, false},
		{"tn[1-2]", strings.Replace(job109, "reported=0", "reported=0-1", 1), []string{"tn1", "tn2"}, true},
		{"tn[1-3]", strings.Replace(job109, "reported=0", "reported=0,2", 1), []string{"tn1", "tn2", "tn3"}, false},
		{"tn[1-3]", strings.Replace(job109, "reported=0", "reported=0,2", 1), []string{"tn1", "tn3"}, false}, // nodes=2 for 3
		{"tn1", "gpuslice:v2;quota_mib=256;nodes=1;reported=0", []string{"tn1"}, true},
		{"tn1", "", []string{"tn1"}, false},
	}
	for _, tc := range cases {
		held := map[string]bool{}
		for _, n := range tc.held {
			held[n] = true
		}
		why := figuresWhole(tc.list, tc.comment, held)
		if (why == "") != tc.whole {
			t.Errorf("%s %v %q: whole %v, want %v (%s)", tc.list, tc.held, tc.comment, why == "", tc.whole, why)
		}
	}
}
