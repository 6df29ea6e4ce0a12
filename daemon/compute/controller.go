package compute

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

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

	// Freezer, when set, enforces the holds from outside the job: a
	// session held for FreezeAfter that still uses the GPU has the
	// cgroups of its processes that used it (Leaf) frozen until it is no
	// longer held (freeze.go). Frozen, when set, is told of each freeze
	// and thaw (metrics).
	Freezer     Freezer
	Leaf        func(pid uint32) (job, dir string)
	FreezeAfter time.Duration
	Frozen      func(session, dir string, frozen bool)

	state map[int]map[string]*Entry
	holds map[string]*hold
	// strays are the processes of each session that use a GPU without
	// having attached (the kernel's pid->job): as long as one lives, the
	// session has work, like one with attached processes.
	strays map[string]map[uint32]bool
	last   time.Time
}

// hold is a session held on some GPU since a pass, and the cgroups of it
// the controller froze.
type hold struct {
	since       time.Time
	dirs        map[string]bool
	unfreezable map[uint32]bool // offending pids in no directory of the job's own (said once)
}

// Run passes every Interval while a session has a share, else every
// IdleInterval or when woken, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTimer(c.Interval)
	defer t.Stop()
	defer c.thawAll() // gpusliced stopping: nothing stays frozen
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
	for id, pids := range c.strays {
		for pid := range pids {
			if unix.Kill(int(pid), 0) == unix.ESRCH {
				delete(pids, pid)
			}
		}
		if len(pids) == 0 {
			delete(c.strays, id)
		}
	}
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
			e.Used, e.Top = 0, 0
			if len(s.Pids) == 0 && len(c.strays[s.ID]) == 0 {
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
	for id := range c.strays {
		if !shared[id] {
			delete(c.strays, id)
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
		c.thawAll()
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
	users := map[int]map[string][]uint32{} // GPU -> session -> its pids that used it
	for g, w := range busy {
		users[g] = map[string][]uint32{}
		for pid, ns := range w.Procs {
			id, attached := byPid[pid]
			if !attached {
				id = c.Sessions.JobOf(pid)
			}
			if e := c.state[g][id]; e != nil && id != "" {
				e.Used += ns
				e.Top = max(e.Top, ns)
				if ns > 0 {
					users[g][id] = append(users[g][id], pid)
					if !attached {
						if c.strays == nil {
							c.strays = map[string]map[uint32]bool{}
						}
						if c.strays[id] == nil {
							c.strays[id] = map[uint32]bool{}
						}
						c.strays[id][pid] = true
					}
				}
			} else {
				others[g] += ns
			}
		}
	}
	bits := map[string]uint64{}
	offenders := map[string][]uint32{} // held sessions that kept using a GPU, and their pids
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
			if was[i] && span(busy, g) > 0 && es[i].Used > Allowance(es, i)*span(busy, g) {
				offenders[id] = append(offenders[id], users[g][id]...)
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
	c.enforce(now, bits, offenders)
	c.Page.Beat()
	return true
}

func span(busy map[int]Window, g int) float64 { return busy[g].Span }

// enforce freezes the sessions that kept using the GPU while held for
// FreezeAfter, and thaws those no longer held (freeze.go).
func (c *Controller) enforce(now time.Time, bits map[string]uint64, offenders map[string][]uint32) {
	if c.Freezer == nil {
		return
	}
	if c.holds == nil {
		c.holds = map[string]*hold{}
	}
	for id, h := range c.holds {
		if bits[id] == 0 {
			c.thaw(id, h) // paid its debt, alone now, released or without a share
			h.since = time.Time{}
			if len(h.dirs) == 0 {
				delete(c.holds, id) // else tried again next pass
			}
		}
	}
	for id, b := range bits {
		if b == 0 {
			continue
		}
		if c.holds[id] == nil {
			c.holds[id] = &hold{dirs: map[string]bool{}, unfreezable: map[uint32]bool{}}
		}
		if c.holds[id].since.IsZero() {
			c.holds[id].since = now
		}
	}
	for id, pids := range offenders {
		h := c.holds[id]
		if h == nil || h.since.IsZero() || now.Sub(h.since) < c.FreezeAfter {
			continue
		}
		for _, pid := range pids {
			job, dir := c.Leaf(pid)
			if job != id || dir == "" {
				if !h.unfreezable[pid] {
					h.unfreezable[pid] = true
					c.Log.Warn("compute share: a session held at its share keeps using the GPU, and its process runs in no cgroup of its job's own: it cannot be frozen",
						"session", id, "pid", pid)
				}
				continue
			}
			if h.dirs[dir] {
				continue
			}
			if err := c.Freezer.Freeze(dir); err != nil {
				c.Log.Warn("compute share: cannot freeze a session held at its share that keeps using the GPU",
					"session", id, "pid", pid, "cgroup", dir, "err", err)
				continue
			}
			h.dirs[dir] = true
			c.Log.Info("compute share: froze a session that kept using the GPU while held at its share; thawed once it is no longer held",
				"session", id, "pid", pid, "cgroup", dir, "held_for", now.Sub(h.since).Round(time.Millisecond))
			if c.Frozen != nil {
				c.Frozen(id, dir, true)
			}
		}
	}
}

func (c *Controller) thaw(id string, h *hold) {
	for dir := range h.dirs {
		if err := c.Freezer.Thaw(dir); err != nil {
			c.Log.Error("compute share: cannot thaw", "session", id, "cgroup", dir, "err", err)
			continue
		}
		delete(h.dirs, dir)
		c.Log.Info("compute share: thawed", "session", id, "cgroup", dir)
		if c.Frozen != nil {
			c.Frozen(id, dir, false)
		}
	}
}

// thawAll thaws every session the controller froze (what it cannot thaw
// stays recorded: it is tried again next pass, and by the daemon).
func (c *Controller) thawAll() {
	for id, h := range c.holds {
		c.thaw(id, h)
		h.since = time.Time{}
		if len(h.dirs) == 0 {
			delete(c.holds, id)
		}
	}
}
