package session

import "github.com/gpuslice/gpuslice/daemon/compute"

// ComputeSessions lists the live sessions that have a GPU time share, with
// their GPUs (inventory index per ledger GPU), quotas and attached pids:
// what the compute controller (daemon/compute) decides from.
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
		if s.released || !s.rec.Compute.Shared() {
			s.mu.Unlock()
			continue
		}
		cs := compute.Session{ID: s.rec.ID, Spec: *s.rec.Compute, GPUs: append([]int(nil), s.gidx...)}
		for _, uuid := range s.rec.GPUs {
			cs.Limits = append(cs.Limits, s.rec.Limits[uuid])
		}
		for _, i := range s.led.InUse() {
			if st, pid := s.led.SlotState(i); st != 0 {
				cs.Pids = append(cs.Pids, pid)
			}
		}
		s.mu.Unlock()
		out = append(out, cs)
	}
	return out
}
