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
