package compute

import "math"

// The decision: a pure function of the shares and the GPU time each
// session used in one pass (decide_test.go).
//
// Each session on a GPU keeps a lag: the GPU time it was entitled to minus
// the time it used. Under contention (two or more sessions with work on the
// GPU) the busy time of a pass is divided among the active sessions by
// their weights (an idle session's weight goes to the others: the shares
// are work-conserving), and a session behind nobody (lag below zero) is
// held at the gate until the others have caught up. Credit is capped at
// MaxCredit, so a session that idled cannot come back and take the GPU for
// long; debt is kept (up to MaxDebt), so time taken by one long kernel is
// paid back afterwards. A cap is a second lag against wall-clock time: a
// capped session is held whenever it used more than cap x elapsed, alone
// or not.

// Share is one session's claim on one GPU.
type Share struct {
	Weight float64 // its weight (any positive scale); 0: not shared (never held)
	Cap    float64 // ceiling as a fraction of the GPU; 0: none
}

// Entry is one session on one GPU, carried from pass to pass.
type Entry struct {
	Share
	Used   float64 // ns of GPU time used in this pass (input)
	Top    float64 // ns used by the busiest of its processes in this pass (input)
	Lag    float64 // ns entitled minus used, over the contended passes
	CapLag float64 // ns allowed by the cap minus used
	Active bool    // had work in the last samples (or was held)
	Held   bool    // the gate holds it (output)
}

// Limits of the lags, in ns.
const (
	MaxLag   = 30e9 // GPU time a session may owe (or be owed)
	capBurst = 20e6 // what a capped session may run ahead of its cap
)

// Step advances one GPU by a pass of dt ns, in which new samples covering
// span ns of the GPU's time came (0: none) and said others ns were used by
// processes of no shared session, and decides who is held.
//
// The busy time of the samples is divided among the active sessions by
// weight, max-min fair: a session that asked for less than its part gets
// what it used, and the rest goes to the others. A pass without samples
// (the driver's sample period can be longer than a pass) changes no lag
// and nobody's activity: the holds stand, but a cap's lag runs with the
// clock and a session whose processes are gone (made inactive by the
// caller) no longer contends.
func Step(es []Entry, dt, span, others float64) {
	var total float64
	n := 0
	for i := range es {
		e := &es[i]
		if span > 0 {
			e.Active = e.Used > 0 || e.Held
		} else {
			e.Active = e.Active || e.Held
		}
		if e.Active && e.Weight > 0 {
			n++
		}
		total += e.Used
	}
	// Who wanted more than it got? The GPU runs the processes free to
	// launch in round robin (processes, not sessions: a session of four
	// busy processes gets four turns to a one-process neighbour's one), so
	// a session none of whose processes got as much as the busiest
	// process free to launch (on a GPU with no idle time) got all it asked
	// for; on a GPU that idled, all of them did. A session with a process
	// at the top wanted more, however many others it has. A held
	// session's kernels that kept running (the gate cannot stop a kernel)
	// took their time from the others, whose demand that pass is then
	// unknown: taken as unlimited.
	idle := span-total-others > 0.05*span
	overrun := false
	top := 0.0
	for _, e := range es {
		overrun = overrun || (e.Held && e.Used > 0.1*span)
		if !e.Held {
			top = max(top, e.Top)
		}
	}
	contended := n >= 2
	demand := make([]float64, len(es))
	for i, e := range es {
		demand[i] = math.Inf(1)
		if !e.Held && (idle || (!overrun && e.Top < 0.9*top)) {
			demand[i] = e.Used
		}
	}
	part := divide(es, demand, total)
	for i := range es {
		e := &es[i]
		if e.Cap > 0 {
			e.CapLag = clamp(e.CapLag+e.Cap*dt-e.Used, -MaxLag, e.Cap*max(capBurst, 2*dt))
		} else {
			e.CapLag = 0
		}
		switch {
		case e.Weight <= 0:
			e.Lag = 0
		case !e.Active:
			e.Lag = min(e.Lag, 0) // gone idle: nothing is owed to it, its debt stays
		case contended:
			e.Lag = clamp(e.Lag+part[i]-e.Used, -MaxLag, MaxLag)
		default:
			e.Lag = 0 // alone: the whole GPU is its share, and nobody is owed
		}
		e.Held = (contended && e.Weight > 0 && e.Active && e.Lag < 0) || (e.Cap > 0 && e.CapLag < 0)
	}
}

// divide shares total among the active weighted sessions by weight, none
// getting more than its demand or (as a fraction of total) its cap; what
// one cannot take goes to the others by weight.
func divide(es []Entry, demand []float64, total float64) []float64 {
	out := make([]float64, len(es))
	fixed := make([]bool, len(es))
	left := total
	for {
		var sum float64
		for i, e := range es {
			if e.Active && e.Weight > 0 && !fixed[i] {
				sum += e.Weight
			}
		}
		if sum == 0 || left <= 0 {
			return out
		}
		again := false
		for i, e := range es {
			if !e.Active || e.Weight <= 0 || fixed[i] {
				continue
			}
			want := demand[i]
			if e.Cap > 0 {
				want = min(want, e.Cap*total)
			}
			if p := left * e.Weight / sum; p > want {
				out[i], fixed[i], again = want, true, true
				left -= want
			} else {
				out[i] = p
			}
		}
		if !again {
			return out
		}
	}
}

func clamp(v, lo, hi float64) float64 { return max(lo, min(v, hi)) }

// Allowance is the fraction of a pass's span that es[i], held throughout
// the pass, may be seen using without counting as using the GPU past the
// gate (the controller freezes a session that keeps doing so): its own
// part of the GPU, its weight among the active sessions' or its cap when
// lower, and never more than a tenth. A session held at the gate only
// finishes the kernels it had queued, in the first passes of its hold
// (FreezeAfter is well beyond them), then uses nothing; one that goes on
// taking more than its own part takes it from the others. A fixed tenth
// let a job of a small share, pacing its launches past the gate just
// under a tenth of the GPU, keep several times its share unfrozen.
func Allowance(es []Entry, i int) float64 {
	var sum float64
	for _, e := range es {
		if e.Active && e.Weight > 0 {
			sum += e.Weight
		}
	}
	part := 1.0
	if w := es[i].Weight; w > 0 && sum > w {
		part = w / sum
	}
	if c := es[i].Cap; c > 0 {
		part = min(part, c)
	}
	return min(part, 0.1)
}
