package compute

import (
	"math"
	"testing"
)

// gpu is a time-sliced GPU for the decision: in each pass the processes
// with work that the gate lets launch share it equally (as the hardware's
// round robin does: a session of procs processes gets procs turns), and a
// session's queued work lasts `queue` ns past the moment it is held. Its
// samples come every `period` passes (1: every pass), each covering the
// passes since the last.
type gpu struct {
	es      []Entry
	procs   []int     // busy processes per session (1 unless set)
	demand  []bool    // wants the GPU
	giant   []float64 // ns of one kernel still running (ignores the gate)
	used    []float64 // totals
	period  int
	passes  int
	pending []float64 // used since the last sample
}

func (g *gpu) pass(dt float64) {
	run := 0
	for i := range g.es {
		if g.demand[i] && (!g.es[i].Held || g.giant[i] > 0) {
			run += g.procs[i]
		}
	}
	for i := range g.es {
		if g.demand[i] && (!g.es[i].Held || g.giant[i] > 0) {
			u := dt / float64(run) * float64(g.procs[i])
			g.giant[i] = math.Max(0, g.giant[i]-u)
			g.used[i] += u
			g.pending[i] += u
		}
	}
	g.passes++
	span := 0.0
	sample := g.passes%max(g.period, 1) == 0
	if sample {
		span = dt * float64(max(g.period, 1))
	}
	for i := range g.es {
		g.es[i].Used, g.es[i].Top = 0, 0
		if sample {
			g.es[i].Used, g.pending[i] = g.pending[i], 0
			g.es[i].Top = g.es[i].Used / float64(g.procs[i]) // its processes round-robin alike
		}
	}
	Step(g.es, dt, span, 0)
}

func newGPU(shares ...Share) *gpu {
	g := &gpu{es: make([]Entry, len(shares)), procs: make([]int, len(shares)), demand: make([]bool, len(shares)),
		giant: make([]float64, len(shares)), used: make([]float64, len(shares)),
		pending: make([]float64, len(shares)), period: 1}
	for i, s := range shares {
		g.es[i].Share = s
		g.procs[i] = 1
		g.demand[i] = true
	}
	return g
}

func (g *gpu) fractions() []float64 {
	var total float64
	for _, u := range g.used {
		total += u
	}
	out := make([]float64, len(g.used))
	for i, u := range g.used {
		out[i] = u / total
	}
	return out
}

const pass = 100e6 // 100 ms

// shareCase is sessions' shares and the fractions of the GPU they should get.
type shareCase struct {
	name   string
	shares []Share
	want   []float64
}

func TestStepShares(t *testing.T) {
	for _, tc := range []shareCase{
		{"25/75", []Share{{Weight: 25}, {Weight: 75}}, []float64{.25, .75}},
		{"20/30/50", []Share{{Weight: 20}, {Weight: 30}, {Weight: 50}}, []float64{.2, .3, .5}},
		{"equal", []Share{{Weight: 1}, {Weight: 1}}, []float64{.5, .5}},
		{"cap under weight", []Share{{Weight: 50, Cap: .3}, {Weight: 50}}, []float64{.3, .7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPU(tc.shares...)
			for i := 0; i < 100; i++ {
				g.pass(pass)
			}
			for i, f := range g.fractions() {
				if math.Abs(f-tc.want[i]) > 0.02 {
					t.Errorf("session %d: %.3f of the GPU, want %.2f (all: %.3f)", i, f, tc.want[i], g.fractions())
				}
			}
		})
	}
}

// A share is the session's, not its processes': a session of 10 with 2,
// 4 or 8 busy processes beside one process of 90 gets 10 % (the GPU's
// round robin gave it 2/3, 4/5, 8/9, and the decision took the one-process
// neighbour's smaller part as all it wanted).
func TestStepSharesAnyProcessCount(t *testing.T) {
	for _, procs := range [][2]int{{2, 1}, {4, 1}, {8, 1}, {1, 4}, {4, 2}} {
		for _, period := range []int{1, 10} {
			g := newGPU(Share{Weight: 10}, Share{Weight: 90})
			g.procs = procs[:]
			g.period = period
			for i := 0; i < 1000; i++ {
				g.pass(pass)
			}
			if f := g.fractions(); math.Abs(f[0]-.1) > .02 {
				t.Errorf("%d processes of 10 beside %d of 90, samples every %d passes: %.3f of the GPU, want 0.10 (all: %.3f)",
					procs[0], procs[1], period, f[0], f)
			}
		}
	}
}

// Alone, a session is never held (work-conserving); with a cap it uses no
// more than its cap of the wall time.
func TestStepAloneAndCap(t *testing.T) {
	g := newGPU(Share{Weight: 25}, Share{Weight: 75})
	g.demand[1] = false
	for i := 0; i < 50; i++ {
		g.pass(pass)
		if g.es[0].Held {
			t.Fatalf("pass %d: a lone session was held", i)
		}
	}
	c := newGPU(Share{Weight: 1, Cap: .3})
	for i := 0; i < 100; i++ {
		c.pass(pass)
	}
	if got := c.used[0] / (100 * pass); math.Abs(got-.3) > .02 {
		t.Errorf("capped lone session used %.3f of the time, want 0.30", got)
	}
}

// A neighbour that goes idle hands its share over at once; its banked
// credit is bounded, so its return takes back only its share.
func TestStepIdleNeighbour(t *testing.T) {
	g := newGPU(Share{Weight: 25}, Share{Weight: 75})
	for i := 0; i < 20; i++ {
		g.pass(pass)
	}
	g.demand[1] = false
	g.pass(pass) // its queue drains
	before := g.used[0]
	g.pass(pass)
	if got := g.used[0] - before; got < 0.99*pass {
		t.Errorf("with its neighbour idle, a session got %.0f%% of a pass", 100*got/pass)
	}
	g.demand[1] = true
	g.used = make([]float64, 2)
	for i := 0; i < 50; i++ {
		g.pass(pass)
	}
	if f := g.fractions(); math.Abs(f[0]-.25) > .03 {
		t.Errorf("after the neighbour's return: %.3f, want 0.25", f)
	}
}

// A long kernel that the gate cannot stop is paid back afterwards: over
// the window, the session is within one pass of its share.
func TestStepGiantKernelPaidBack(t *testing.T) {
	g := newGPU(Share{Weight: 25}, Share{Weight: 75})
	g.giant[0] = 1e9 // one 1 s kernel, launched at once
	for i := 0; i < 100; i++ {
		g.pass(pass)
	}
	over := g.used[0] - 0.25*(g.used[0]+g.used[1])
	if over > pass {
		t.Errorf("the session with one giant kernel used %.0f ms beyond its share over 10 s", over/1e6)
	}
}

// The driver's samples may come once a second (NVML: 1/6 s to 1 s by
// product) while the passes run every 100 ms: a pass without samples
// changes nobody's lag, so the holds stand until the next samples and the
// shares and a cap still hold.
func TestStepSamplesSlowerThanPasses(t *testing.T) {
	for _, tc := range []shareCase{
		{"25/75", []Share{{Weight: 25}, {Weight: 75}}, []float64{.25, .75}},
		{"20/30/50", []Share{{Weight: 20}, {Weight: 30}, {Weight: 50}}, []float64{.2, .3, .5}},
		{"cap alone", []Share{{Weight: 1, Cap: .3}}, []float64{.3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPU(tc.shares...)
			g.period = 10
			for i := 0; i < 1000; i++ {
				g.pass(pass)
			}
			got := g.fractions()
			if len(tc.shares) == 1 {
				got[0] = g.used[0] / (1000 * pass) // of the wall time
			}
			for i, f := range got {
				if math.Abs(f-tc.want[i]) > 0.03 {
					t.Errorf("session %d: %.3f of the GPU, want %.2f (all: %.3f)", i, f, tc.want[i], got)
				}
			}
		})
	}
}
