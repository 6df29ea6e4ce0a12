package session

import (
	"github.com/gpuslice/gpuslice/daemon/compute"
	"github.com/gpuslice/gpuslice/internal/api"
)

// ComputeSessions lists the live sessions with their GPU time shares, GPUs
// (inventory index per ledger GPU), quotas and attached pids: what the
// compute controller (daemon/compute) decides from. A session without a
// share is listed too, with an unshared Spec: it keeps a slot on the
// compute page, so a share a PATCH gives it later reaches the processes
// already running (their launch gates found the slot when they attached),
// but without its quotas and pids: the controller never reads them, and
// walking every attached process of every session ten times a second cost
// as much CPU as the audit itself.
func (m *Manager) ComputeSessions() []compute.Session {
	m.mu.RLock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.RUnlock()
	var out []compute.Session
	for _, s := range ss {
		s.mu.Lock()
		if s.released {
			s.mu.Unlock()
			continue
		}
		cs := compute.Session{ID: s.rec.ID, Spec: api.Compute{Mode: api.ComputeOff}, GPUs: append([]int(nil), s.gidx...)}
		if s.rec.Compute != nil {
			cs.Spec = *s.rec.Compute
		}
		if cs.Spec.Shared() {
			for _, uuid := range s.rec.GPUs {
				cs.Limits = append(cs.Limits, s.rec.Limits[uuid])
			}
			for _, i := range s.led.InUse() {
				if st, pid := s.led.SlotState(i); st != 0 {
					cs.Pids = append(cs.Pids, pid)
				}
			}
		}
		s.mu.Unlock()
		out = append(out, cs)
	}
	return out
}
