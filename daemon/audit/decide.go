// Package audit compares what the driver reports each job's processes hold
// (NVML running processes: the authority, including memory no allocation
// hook sees) with the job's quota, and acts on overruns. It is shaped like
// a collector: one type per source (Source: per-process usage; Jobs: which
// session a pid belongs to), one loop that reads, decides (Decide, a pure
// function) and acts (Actor).
package audit

import "sort"

// Sample is what one process holds on one GPU, as the driver reports it.
type Sample struct {
	PID   uint32
	GPU   int // inventory index
	Bytes uint64
}

// Attributed is a Sample of a process that belongs to Session.
type Attributed struct {
	Sample
	Session string
}

// Quotas holds each session's limit per inventory GPU. A GPU missing from
// a session's map has limit 0: the session may hold nothing there.
type Quotas map[string]map[int]uint64

// Overrun is one session holding more than its limit on one GPU, with the
// processes to stop so that it fits again: largest first, as the kernel's
// OOM killer picks, until the remaining sum is within the limit.
type Overrun struct {
	Session string
	GPU     int
	Limit   uint64
	Used    uint64   // the session's sum on GPU
	Victims []uint32 // pids, largest holder first
	Freed   uint64   // what the victims hold
}

// Decide returns every overrun in usage, sorted by session then GPU. It is
// a pure function of its arguments.
func Decide(q Quotas, usage []Attributed) []Overrun {
	type key struct {
		s string
		g int
	}
	procs := map[key][]Sample{}
	sums := map[key]uint64{}
	for _, u := range usage {
		if u.Session == "" || u.Bytes == 0 {
			continue
		}
		k := key{u.Session, u.GPU}
		procs[k] = append(procs[k], u.Sample)
		sums[k] = addSat(sums[k], u.Bytes)
	}
	var out []Overrun
	for k, sum := range sums {
		limit := q[k.s][k.g]
		if sum <= limit {
			continue
		}
		ps := procs[k]
		sort.Slice(ps, func(i, j int) bool {
			if ps[i].Bytes != ps[j].Bytes {
				return ps[i].Bytes > ps[j].Bytes
			}
			return ps[i].PID < ps[j].PID
		})
		o := Overrun{Session: k.s, GPU: k.g, Limit: limit, Used: sum}
		left := sum
		for _, p := range ps {
			if left <= limit {
				break
			}
			o.Victims = append(o.Victims, p.PID)
			o.Freed = addSat(o.Freed, p.Bytes)
			left -= p.Bytes
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Session != out[j].Session {
			return out[i].Session < out[j].Session
		}
		return out[i].GPU < out[j].GPU
	})
	return out
}

// Sums is each session's total per GPU in usage.
func Sums(usage []Attributed) map[string]map[int]uint64 {
	out := map[string]map[int]uint64{}
	for _, u := range usage {
		if u.Session == "" {
			continue
		}
		m := out[u.Session]
		if m == nil {
			m = map[int]uint64{}
			out[u.Session] = m
		}
		m[u.GPU] = addSat(m[u.GPU], u.Bytes)
	}
	return out
}

// Steady keeps, per process and GPU, the smaller of two samples taken
// moments apart: memory a process really holds is in both, while two
// reads of different processes at slightly different instants (one
// freeing, the next allocating) cannot add up to a false overrun.
func Steady(a, b []Sample) []Sample {
	type key struct {
		pid uint32
		g   int
	}
	first := make(map[key]uint64, len(a))
	for _, s := range a {
		first[key{s.PID, s.GPU}] += s.Bytes
	}
	var out []Sample
	for _, s := range b {
		if v, ok := first[key{s.PID, s.GPU}]; ok {
			out = append(out, Sample{PID: s.PID, GPU: s.GPU, Bytes: min(v, s.Bytes)})
		}
	}
	return out
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
