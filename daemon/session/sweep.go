package session

import (
	"errors"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
)

// Sweep is the periodic backstop: it reclaims slots whose process is gone,
// re-bases idle ledgers, reaps sessions past their TTL with no process, and
// prunes old history.
func (m *Manager) Sweep() {
	m.mu.RLock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.RUnlock()
	now := m.opt.Now()
	var expired, deleted []string
	var dirty []store.Record
	type unsavedAt struct {
		s *Session
		n uint64
	}
	var unsaved []unsavedAt // of the records in dirty
	for _, s := range ss {
		s.mu.Lock()
		if s.released {
			s.mu.Unlock()
			continue
		}
		var changed bool
		if m.reclaimDeadLocked(s) == 0 {
			s.led.Rebase()
			if s.deleting {
				deleted = append(deleted, s.rec.ID)
			} else if now.After(s.rec.Expires) {
				expired = append(expired, s.rec.ID)
			}
		} else if slack := min(s.rec.TTL/2, time.Hour); s.rec.Expires.Before(now.Add(s.rec.TTL - slack)) {
			// A session in use never expires: its TTL runs again from the
			// last sweep that saw one of its processes alive (a long job
			// idle between two steps keeps its quota). Moved in steps of
			// slack so the database is written at most once per slack.
			s.rec.Expires = now.Add(s.rec.TTL)
			changed = true
		}
		// Keep the peaks in the database too: they outlive a lost ledger.
		for g, uuid := range s.rec.GPUs {
			if p := s.peakOf(g); p > s.rec.Peak[uuid] {
				if !changed {
					peaks := make(map[string]uint64, len(s.rec.GPUs))
					for k, v := range s.rec.Peak {
						peaks[k] = v
					}
					s.rec.Peak = peaks
					changed = true
				}
				s.rec.Peak[uuid] = p
			}
		}
		if changed || s.unsaved > 0 {
			dirty = append(dirty, s.rec)
		}
		if s.unsaved > 0 {
			unsaved = append(unsaved, unsavedAt{s, s.unsaved})
		}
		s.mu.Unlock()
	}
	if err := m.st.PutSessions(dirty); err != nil {
		m.opt.Log.Warn("persist peaks and expiry", "err", err)
	} else {
		for _, u := range unsaved {
			u.s.mu.Lock()
			if u.s.unsaved == u.n { // not refused again since
				u.s.unsaved = 0
				m.opt.Log.Info("persist session: written", "session", u.s.rec.ID)
			}
			u.s.mu.Unlock()
		}
	}
	m.writeUnwritten()
	for _, id := range deleted {
		m.releaseDeleting(id)
	}
	for _, id := range expired {
		if _, err := m.releaseIf(id, "ttl", func(s *Session) bool {
			// Between the decision above and now a process may have
			// attached, or the id been released and created again.
			return m.reclaimDeadLocked(s) == 0 && m.opt.Now().After(s.rec.Expires)
		}); err != nil && !errors.Is(err, api.ErrNotFound) && !errors.Is(err, errStillInUse) {
			m.opt.Log.Warn("reap expired session", "session", id, "err", err)
		}
	}
	// Pruning reads every report: at most once an hour.
	if m.opt.HistoryRetention > 0 && (m.lastPrune.IsZero() || now.Sub(m.lastPrune) >= time.Hour) {
		m.lastPrune = now
		if n, err := m.st.PruneHistory(now.Add(-m.opt.HistoryRetention)); err != nil {
			m.opt.Log.Warn("prune history", "err", err)
		} else if n > 0 {
			m.opt.Log.Info("pruned history", "reports", n)
		}
	}
}
