package compute

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Session is what the controller needs of one live session. One whose
// Spec is not Shared keeps its slot on the page but is never held, and its
// GPU time counts as the GPU's, not anyone's: its Limits and Pids are not
// read (and may be left out).
type Session struct {
	ID     string
	GPUs   []int    // inventory index of each ledger GPU (-1: not on this node)
	Limits []uint64 // its memory quota on each ledger GPU
	Spec   api.Compute
	Pids   []uint32 // its attached processes
}

// Sessions lists the live sessions, and says which job a pid that never
// attached runs in (from the kernel).
type Sessions interface {
	ComputeSessions() []Session
	JobOf(pid uint32) string
}

// Source measures GPU time: per GPU index, what its samples since the last
// call say (a GPU with none new is left out).
type Source interface {
	Busy() (map[int]Window, error)
}

// Window is what one GPU's new samples say: the GPU time per pid (ns) and
// the span of the GPU's time they cover (ns). The driver samples each GPU
// at a period of its own (NVML's documentation: 1/6 s to 1 s by product),
// which may be longer than a pass: in a pass with no new samples nobody is
// known to have used anything or gone idle (Step).
type Window struct {
	Procs map[uint32]float64
	Span  float64
}

// Controller runs the passes: measure, decide, publish.
type Controller struct {
	Page     *Page
	Source   Source
	Sessions Sessions
	Physical []uint64 // each GPU's memory (proportional shares)
	Interval time.Duration
	// IdleInterval is the pause between passes while no session has a
	// share (nothing to measure or hold), when longer than Interval; Wake
	// ends it at once (a share was given).
	IdleInterval time.Duration
	Wake         <-chan struct{}
	Log          *slog.Logger
	// Passes, when set, is told of each pass's decisions (tests, metrics).
	Passes func(gpu int, entries map[string]Entry)

	state map[int]map[string]*Entry
	last  time.Time
}

// Run passes every Interval while a session has a share, else every
// IdleInterval or when woken, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTimer(c.Interval)
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		case <-c.Wake:
			now = time.Now()
			t.Stop()
		}
		wait := c.Interval
		if !c.Pass(now) && c.IdleInterval > wait {
			wait = c.IdleInterval
		}
		t.Reset(wait)
	}
}

// ShareOf is a session's weight and cap on a GPU of physical bytes where
// its quota is limit.
func ShareOf(spec api.Compute, limit, physical uint64) Share {
	s := Share{Cap: float64(spec.MaxPercent) / 100}
	switch spec.Mode {
	case api.ComputePercent:
		s.Weight = float64(spec.Percent)
	case api.ComputeProportional:
		if physical > 0 {
			s.Weight = 100 * float64(min(limit, physical)) / float64(physical)
		}
	}
	return s
}

// Pass is one round: the GPU time each session used since the last pass,
// the decision per GPU, the throttle words. It returns whether a session
// has a share (false: the next pass can wait).
func (c *Controller) Pass(now time.Time) (sharing bool) {
	dt := float64(c.Interval)
	if !c.last.IsZero() {
		dt = float64(now.Sub(c.last))
	}
	c.last = now
	// resuming (the first pass, or the first since no session had a
	// share): the samples the driver kept meanwhile are not this pass's
	resuming := c.state == nil
	if resuming {
		c.state = map[int]map[string]*Entry{}
	}
	live := map[string]bool{}   // every live session: it keeps its slot
	shared := map[string]bool{} // those with a share: the controller's
	byPid := map[uint32]string{}
	ledgerIdx := map[string]map[int]int{} // session -> inventory GPU -> ledger index
	for _, s := range c.Sessions.ComputeSessions() {
		live[s.ID] = true
		c.Page.Assign(s.ID)
		if !s.Spec.Shared() {
			continue
		}
		shared[s.ID] = true
		for _, p := range s.Pids {
			byPid[p] = s.ID
		}
		ledgerIdx[s.ID] = map[int]int{}
		for li, g := range s.GPUs {
			if g < 0 || g >= len(c.Physical) {
				continue
			}
			ledgerIdx[s.ID][g] = li
			st := c.state[g]
			if st == nil {
				st = map[string]*Entry{}
				c.state[g] = st
			}
			e := st[s.ID]
			if e == nil {
				e = &Entry{}
				st[s.ID] = e
			}
			e.Share = ShareOf(s.Spec, s.Limits[li], c.Physical[g])
			e.Used = 0
			if len(s.Pids) == 0 {
				// its processes are gone: it wants nothing, its share is free
				e.Held, e.Active = false, false
			}
		}
	}
	for _, id := range c.Page.Assigned() {
		if !live[id] {
			c.Page.Release(id)
		}
	}
	if len(shared) == 0 {
		for g := range c.state {
			if c.Passes != nil {
				c.Passes(g, nil) // nobody left on it
			}
		}
		c.state = nil // nobody shares: no NVML read, nothing held
		for id := range live {
			c.Page.SetThrottle(id, 0) // a share removed: its session runs free
		}
		c.Page.Beat()
		return false
	}
	busy, err := c.Source.Busy()
	if err != nil {
		c.Log.Warn("compute share: cannot measure GPU time", "err", err)
		busy = nil
	}
	if resuming {
		busy = nil // what ran before any share: nobody owes it
	}
	others := map[int]float64{}
	for g, w := range busy {
		for pid, ns := range w.Procs {
			id, ok := byPid[pid]
			if !ok {
				id = c.Sessions.JobOf(pid)
			}
			if e := c.state[g][id]; e != nil && id != "" {
				e.Used += ns
			} else {
				others[g] += ns
			}
		}
	}
	bits := map[string]uint64{}
	for g, st := range c.state {
		ids := make([]string, 0, len(st))
		es := make([]Entry, 0, len(st))
		for id, e := range st {
			if !shared[id] {
				delete(st, id) // released, or its share removed: it goes at once
				continue
			}
			ids = append(ids, id)
			es = append(es, *e)
		}
		was := make([]bool, len(es))
		for i := range es {
			was[i] = es[i].Held
		}
		Step(es, dt, busy[g].Span, others[g])
		seen := map[string]Entry{}
		for i, id := range ids {
			if es[i].Held != was[i] {
				c.Log.Debug("compute share", "gpu", g, "session", id, "held", es[i].Held,
					"used_ms", es[i].Used/1e6, "lag_ms", es[i].Lag/1e6, "cap_lag_ms", es[i].CapLag/1e6)
			}
			*st[id] = es[i]
			seen[id] = es[i]
			if es[i].Held {
				bits[id] |= 1 << uint(ledgerIdx[id][g])
			}
		}
		if c.Passes != nil {
			c.Passes(g, seen)
		}
	}
	for id := range live {
		c.Page.SetThrottle(id, bits[id])
	}
	c.Page.Beat()
	return true
}
