package session

import "github.com/gpuslice/gpuslice/internal/api"

// Inventory returns the node's GPUs with committed and used bytes.
func (m *Manager) Inventory() []api.GPU {
	m.mu.RLock()
	defer m.mu.RUnlock()
	committed, count := m.committedLocked("")
	used := m.usedLocked()
	out := make([]api.GPU, len(m.gpus))
	for i, g := range m.gpus {
		out[i] = api.GPU{Index: i, UUID: g.UUID, Name: g.Name, PhysicalBytes: g.Physical,
			CommittedBytes: committed[i], UsedBytes: used[i], Sessions: count[i], Enforcement: g.Enforcement()}
		if c, ok := m.ctxCostLocked(i); ok {
			out[i].ContextCostBytes = &c
		}
	}
	return out
}

func (m *Manager) usedLocked() []uint64 {
	used := make([]uint64, len(m.gpus))
	for _, s := range m.sessions {
		for g, i := range s.gidx {
			if i >= 0 {
				used[i] += s.usedOf(g)
			}
		}
	}
	return used
}

// Stats is a snapshot for metrics.
type Stats struct {
	Sessions  int
	Attached  int
	Committed []uint64 // per inventory GPU
	Used      []uint64
	Count     []int
	Denied    []uint64 // monotonic: live + released
	PerSess   []SessionStats
}

// SessionStats is one session's figures (metrics_debug).
type SessionStats struct {
	ID    string
	UUIDs []string
	Limit []uint64
	Used  []uint64
	Peak  []uint64
}

// Snapshot collects Stats; perSession adds SessionStats.
func (m *Manager) Snapshot(perSession bool) Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := Stats{Sessions: len(m.sessions)}
	now := m.opt.Now()
	st.Committed, st.Count = m.committedLocked("")
	st.Used = m.usedLocked()
	m.releasedMu.Lock()
	st.Denied = append([]uint64(nil), m.releasedDenied...)
	m.releasedMu.Unlock()
	for _, s := range m.sessions {
		for g, i := range s.gidx {
			if i >= 0 {
				st.Denied[i] += s.deniedOf(g, now)
			}
		}
		st.Attached += s.led.NInUse()
		if perSession {
			ss := SessionStats{ID: s.rec.ID, UUIDs: s.rec.GPUs}
			for g := range s.rec.GPUs {
				ss.Limit = append(ss.Limit, s.led.Limit(g))
				ss.Used = append(ss.Used, s.usedOf(g))
				ss.Peak = append(ss.Peak, min(s.led.Peak(g), s.bytesBound(g)))
			}
			st.PerSess = append(st.PerSess, ss)
		}
	}
	return st
}
