package slurm

// The jobs that started without a session on any node, explained: a
// node's gpusliced refuses a job whose quota does not fit beside the
// sessions it holds (the job fails, the node stays in service), and its
// log names who held the room (the sessions, largest first, since when).
// Slurm placed the job because its shards were free; a holder whose job
// Slurm had already ended when the refusal came is room gpuslice kept
// that Slurm had given back, a disagreement worth a line of its own.

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// refusal is one "create refused" line of a node's gpusliced log.
type refusal struct {
	node, job string
	at        time.Time
	why       string
	holders   []holder
}

// holder is a session named in a refusal: its id (the job's) and since
// when it held its room.
type holder struct {
	job   string
	size  string
	since time.Time
	ended bool // released by its job's end, waiting for its processes
}

var (
	reRefused  = regexp.MustCompile(`^time=(\S+) .*msg="create refused" session=(\S+) err="((?:[^"\\]|\\.)*)"`)
	reHeldBy   = regexp.MustCompile(`gpu\d+_held_by="((?:[^"\\]|\\.)*)"`)
	reHolderAt = regexp.MustCompile(`^(\S+) (\S+) since (\S+)( \(released)?`)
)

// refusals reads the refusals of every node's gpusliced log.
func (iv *invariants) refusals() map[string][]refusal {
	out := map[string][]refusal{}
	for _, n := range iv.s.c.nodes {
		f, err := os.Open(iv.s.c.path("log", "gpusliced-"+n.Name+".out"))
		if err != nil {
			continue
		}
		for _, r := range parseRefusals(n.Name, f) {
			out[r.job] = append(out[r.job], r)
		}
		f.Close()
	}
	return out
}

func parseRefusals(node string, f *os.File) []refusal {
	var out []refusal
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := reRefused.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, m[1])
		r := refusal{node: node, job: strings.Trim(m[2], `"`), at: at, why: m[3]}
		for _, h := range reHeldBy.FindAllStringSubmatch(sc.Text(), -1) {
			for _, e := range strings.Split(h[1], "; ") {
				if hm := reHolderAt.FindStringSubmatch(e); hm != nil {
					since, _ := time.Parse(time.RFC3339, hm[3])
					r.holders = append(r.holders, holder{job: hm[1], size: hm[2], since: since, ended: hm[4] != ""})
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// explainNoSession says why each job that started without a session had
// none (none: "JOBID STATE on NODES"), from the nodes' refusals and
// Slurm's end times of the sessions that held the room (ends: job id ->
// its end in sacct, as checkAccounting reads it). It returns the note's
// counts and, for the log, one line per job.
func explainNoSession(none []string, refused map[string][]refusal, ends map[string]time.Time) (string, []string) {
	var nRefused, nStale, nUnexplained int
	var lines []string
	for _, j := range none {
		id, _, _ := strings.Cut(j, " ")
		rs := refused[id]
		if len(rs) == 0 {
			nUnexplained++
			lines = append(lines, j+": no node's gpusliced refused it (its Prolog did not reach one)")
			continue
		}
		nRefused++
		r := rs[len(rs)-1]
		var held []string
		stale := false
		for _, h := range r.holders {
			s := fmt.Sprintf("%s %s", h.job, h.size)
			if end, ok := ends[h.job]; ok && end.Before(r.at.Add(-time.Second)) {
				s += fmt.Sprintf(" (its job ended %s before)", r.at.Sub(end).Round(time.Second))
				stale = true
			}
			if h.ended {
				s += " (released, waiting for its processes)"
			}
			held = append(held, s)
		}
		if stale {
			nStale++
		}
		lines = append(lines, fmt.Sprintf("%s: refused by %s at %s: %s; held by %s", j, r.node, r.at.Format("15:04:05"), r.why,
			strings.Join(held, ", ")))
	}
	note := fmt.Sprintf("%d jobs started without a session on any node (none to report): %d refused by a node for want of room "+
		"(%d of them while a session whose job Slurm had ended held room), %d with no refusal logged",
		len(none), nRefused, nStale, nUnexplained)
	return note, lines
}
