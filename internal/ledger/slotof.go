package ledger

import "sync/atomic"

// SlotOf is the attached slot that pid claimed last, found in the
// daemon's own record (not in the slots' pids, which the job's processes
// can write), with the start time written in that slot when it was
// claimed. That one lives in the counters too: the caller checks it
// against a record of its own (the daemon's exit watcher). Daemon side;
// the caller serialises it with Claim and Reclaim. ok is false on a
// client mapping.
func (l *Ledger) SlotOf(pid uint32) (slot int, start uint64, ok bool) {
	if l.inUse == nil {
		return -1, 0, false
	}
	i, ok := l.slotOf(pid)
	if !ok || !l.used(i) || l.slotPID[i] != pid {
		return -1, 0, false
	}
	if st, _ := l.SlotState(i); st != SlotAttached {
		return -1, 0, false
	}
	return i, atomic.LoadUint64(u64(l.ctr, l.slot(i, SlotOffStartTime))), true
}
