package session

import "github.com/gpuslice/gpuslice/daemon/reclaim"

// AttachedProcess finds pid among the processes attached to a live
// session, for a request that only an attached process may make (SHORT):
// it returns the key the daemon registered for it (session, slot, pid and
// the start time read when it attached). Each session's slot is found in
// the ledger's own record of pids (one map look-up); the start time lives
// in the counters the job can write, so a slot counts only when the
// daemon watches that very key (reclaim.Watcher.Watches). uid is the
// peer's (SO_PEERCRED): a non-root process attaches only to a session of
// its own uid, so only those are searched, and a user with no session
// costs one comparison per session. The caller still checks that the
// process now holding pid is the one with that start time (pids are
// reused). No system call.
func (m *Manager) AttachedProcess(uid, pid uint32) (reclaim.Key, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for id, s := range m.sessions {
		if (uid != 0 && s.uid != uid) || s.led.NInUse() == 0 {
			continue
		}
		s.mu.Lock()
		k, ok := reclaim.Key{}, false
		if !s.released {
			var slot int
			if slot, k.StartTime, ok = s.led.SlotOf(pid); ok {
				k.Session, k.Slot, k.PID = id, slot, pid
				ok = m.watcher.Watches(k)
			}
		}
		s.mu.Unlock()
		if ok {
			return k, true
		}
	}
	return reclaim.Key{}, false
}

// ExitedProcess finds pid among the processes attached to a live session
// that exited within reclaim.ExitGrace (reclaim/exits.go): the key the
// daemon registered for it, when its session is uid's (any for root). For
// a SHORT read after its sender has gone; the caller checks that the
// process that connected has exited too. No system call.
func (m *Manager) ExitedProcess(uid, pid uint32) (reclaim.Key, bool) {
	k, ok := m.watcher.ExitedLately(pid)
	if !ok || k.Slot == creatorSlot {
		return reclaim.Key{}, false
	}
	m.mu.RLock()
	s, ok := m.sessions[k.Session]
	m.mu.RUnlock()
	if !ok || (uid != 0 && s.uid != uid) {
		return reclaim.Key{}, false
	}
	return k, true
}

// Unused is what session id may still take on the GPU with uuid: its
// quota there (the daemon's own limit) less what it holds, the larger of
// what its ledger counts used and what the last audit pass found it
// holding (the driver's figure, which the job cannot lower), and the
// GPU's inventory index. ok is false when the session is not live or has
// no quota on that GPU. It only decides whether a SHORT is audited at
// once (ipcserver/short.go), never a reclaim or a report.
func (m *Manager) Unused(id, uuid string) (unused uint64, gpu int, ok bool) {
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if !ok {
		return 0, -1, false
	}
	var audited map[int]uint64
	if p := m.audited.Load(); p != nil {
		audited = (*p)[id]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return 0, -1, false
	}
	for g, u := range s.rec.GPUs {
		if u != uuid || g >= len(s.gidx) || s.gidx[g] < 0 {
			continue
		}
		limit, used := s.led.Limit(g), s.led.Used(g)
		used = max(used, audited[s.gidx[g]])
		if used >= limit {
			return 0, s.gidx[g], true
		}
		return limit - used, s.gidx[g], true
	}
	return 0, -1, false
}
