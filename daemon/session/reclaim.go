package session

import (
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// process is left. Caller holds s.mu.
func (m *Manager) reclaimSlotLocked(s *Session, slot int) {
	delete(s.images, slot)
	got := s.led.Reclaim(slot, s.driverChargedLocked(slot))
	s.forgetDriverLocked(slot)
	var total uint64
	for g, b := range got {
		b = s.addReclaimed(g, b)
		if g < len(s.seenPeak) && b > s.seenPeak[g] {
			s.seenPeak[g] = b // the dead process alone held that much
		}
		total += b
		if b > 0 && m.ev.Reclaimed != nil && s.gidx[g] >= 0 {
			m.ev.Reclaimed(s.gidx[g], b)
		}
	}
	m.rebaseIfIdleLocked(s)
	if total > 0 {
		m.opt.Log.Info("reclaimed", "session", s.rec.ID, "slot", slot, "bytes", total)
	}
}

func (m *Manager) rebaseIfIdleLocked(s *Session) {
	if s.led.NInUse() == 0 {
		s.led.Rebase()
	}
}

// onExit is the watcher's callback: a watched process died. The kernel
// said so (its pidfd is readable only once every thread of the process
// has exited, a zombie leader whose other threads run has not), so /proc
// is not asked again.
func (m *Manager) onExit(k reclaim.Key) {
	if k.Slot == creatorSlot { // the process a session lives with (creator.go)
		go m.creatorGone(k)
		return
	}
	m.mu.RLock()
	s, ok := m.sessions[k.Session]
	m.mu.RUnlock()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	sl := s.led.Slot(k.Slot)
	if sl.State != ledger.SlotAttached || sl.PID != k.PID || sl.StartTime != k.StartTime {
		return
	}
	m.reclaimSlotLocked(s, k.Slot)
	if m.ev.ProcessReclaim != nil {
		m.ev.ProcessReclaim()
	}
	m.opt.Log.Debug("process exited", "session", k.Session, "pid", k.PID, "slot", k.Slot)
	if s.deleting && s.led.NInUse() == 0 {
		go m.releaseDeleting(k.Session) // takes m.mu, then s.mu
	}
}

// alive answers for an attached slot's process: from its pidfd when it
// is watched, else from /proc.
func alive(w *reclaim.Watcher, k reclaim.Key) bool {
	if exited, known := w.Exited(k); known {
		return !exited
	}
	return reclaim.Alive(k.PID, k.StartTime)
}

// reclaimDeadLocked gives back what the session's dead processes held and
// returns how many of its processes are alive.
func (m *Manager) reclaimDeadLocked(s *Session) (attached int) {
	for _, i := range s.led.InUse() {
		st, pid := s.led.SlotState(i)
		sl := s.led.Slot(i)
		k := reclaim.Key{Session: s.rec.ID, Slot: i, PID: pid, StartTime: sl.StartTime}
		if st == ledger.SlotAttached && alive(m.watcher, k) {
			attached++
			continue
		}
		if st == ledger.SlotAttached {
			m.watcher.RemoveExited(k) // dead, its exit not delivered yet
		} else {
			m.watcher.Remove(k)
		}
		m.reclaimSlotLocked(s, i)
		if m.ev.ProcessReclaim != nil {
			m.ev.ProcessReclaim()
		}
	}
	return attached
}
