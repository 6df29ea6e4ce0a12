package session

import (
	"sync"
	"time"
)

// The counters file is writable by the job (its hot path needs that), so
// every figure read from it is bounded here before it reaches a report, a
// metric or a decision: bytes by the GPU's physical memory (in the limits
// file, which only the daemon writes), denials by a rate no real job
// reaches. Peaks also take the audited figure, which comes from the driver.

// maxDenialsPerSecond bounds how fast a session's denial count may grow.
const maxDenialsPerSecond = 100000

// figures is a session's daemon-owned bookkeeping of job-written counters.
type figures struct {
	mu        sync.Mutex
	denied    []uint64 // per ledger GPU: accepted denial count
	deniedAt  time.Time
	reclaimed []uint64 // per ledger GPU: bytes the daemon reclaimed
}

func newFigures(n int) *figures {
	return &figures{denied: make([]uint64, n), reclaimed: make([]uint64, n)}
}

// bytesBound is the most a session can really hold on ledger GPU g.
func (s *Session) bytesBound(g int) uint64 {
	if p := s.led.Physical(g); p > 0 {
		return p
	}
	return s.led.Limit(g)
}

// usedOf is the ledger's used bytes on g, bounded.
func (s *Session) usedOf(g int) uint64 { return min(s.led.Used(g), s.bytesBound(g)) }

// seeLocked is the daemon reading what the session holds on every GPU
// (usedOf, bounded) and keeping the highest reading as seenPeak: a figure
// of the daemon's own, which a job that rewrites its peak counter cannot
// lower. It reads at every audit pass (Manager.ObserveAudit) and at the
// release report; a dead process's bytes, given back when its slot is
// reclaimed, count too (reclaimSlotLocked). So a job's peak is never
// lower than what it held at any of those moments. Caller holds s.mu.
func (s *Session) seeLocked() {
	for g := range s.seenPeak {
		if u := s.usedOf(g); u > s.seenPeak[g] {
			s.seenPeak[g] = u
		}
	}
}

// peakOf is the session's peak on g: the audited peak, the daemon's own
// readings, the ledger's (bounded) or the persisted one, whichever is
// highest. Caller holds s.mu.
func (s *Session) peakOf(g int) uint64 {
	p := min(s.led.Peak(g), s.bytesBound(g))
	if g < len(s.auditPeak) {
		p = max(p, s.auditPeak[g])
	}
	if g < len(s.seenPeak) {
		p = max(p, s.seenPeak[g])
	}
	return max(p, min(s.rec.Peak[s.rec.GPUs[g]], s.bytesBound(g)))
}

// deniedOf is the session's denial count on g: it never goes back, and
// grows at most maxDenialsPerSecond since the last reading.
func (s *Session) deniedOf(g int, now time.Time) uint64 {
	f := s.fig
	f.mu.Lock()
	defer f.mu.Unlock()
	v := s.led.Denied(g)
	if v > f.denied[g] {
		allowed := uint64(maxDenialsPerSecond)
		if !f.deniedAt.IsZero() {
			allowed += uint64(max(now.Sub(f.deniedAt), 0).Seconds() * maxDenialsPerSecond)
		}
		f.denied[g] += min(v-f.denied[g], allowed)
	}
	if g == len(f.denied)-1 {
		f.deniedAt = now
	}
	return f.denied[g]
}

// addReclaimed counts bytes the daemon reclaimed on g, each reclaim
// bounded, and returns the bounded figure.
func (s *Session) addReclaimed(g int, b uint64) uint64 {
	b = min(b, s.bytesBound(g))
	s.fig.mu.Lock()
	s.fig.reclaimed[g] += b
	s.fig.mu.Unlock()
	return b
}

func (s *Session) reclaimedOf(g int) uint64 {
	s.fig.mu.Lock()
	defer s.fig.mu.Unlock()
	return s.fig.reclaimed[g]
}
