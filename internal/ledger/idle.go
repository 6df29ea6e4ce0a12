package ledger

import (
	"os"
	"sync/atomic"
	"unique"

	"golang.org/x/sys/unix"
)

// What keeps an idle session cheap for the daemon (docs/ledger.md "Scale"):
// the slot bitmap, the copy of the limits and the frozen counters header.

// limitsCopy is the daemon's copy of a limits file.
type limitsCopy struct {
	session    string
	uuids      []string
	limit      []uint64
	phys       []uint64
	generation uint64
}

// initInUse records the slots in use (daemon side). Only the data extents
// of the counters file are read (lseek SEEK_DATA/SEEK_HOLE): reading a
// hole through the mapping would allocate its page, and a slot in a hole
// was never claimed.
func (l *Ledger) initInUse(ctr *os.File) {
	l.inUse = make([]uint64, (l.nslots+63)/64)
	fd := int(ctr.Fd())
	size := int64(len(l.ctr))
	for off := int64(CountersHdrSize); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			if err != unix.ENXIO { // ENXIO: no data after off
				l.scanSlots(0, l.nslots) // no SEEK_DATA: read every slot
			}
			return
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = size
		}
		// Slots whose first 8 bytes (state, pid) lie in [data, hole).
		first := int((data - CountersHdrSize + SlotSize - 1) / SlotSize)
		last := int((hole-CountersHdrSize-8)/SlotSize) + 1
		l.scanSlots(first, min(last, l.nslots))
		off = hole
	}
}

// scanSlots marks the non-free slots among [from, to).
func (l *Ledger) scanSlots(from, to int) {
	for i := from; i < to; i++ {
		if atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffState))) != SlotFree && !l.used(i) {
			l.setUsed(i, true, atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffPID))))
		}
	}
}

func (l *Ledger) used(i int) bool { return l.inUse[i/64]&(1<<(i%64)) != 0 }

func (l *Ledger) setUsed(i int, on bool, pid uint32) {
	if l.byPID == nil {
		l.byPID, l.slotPID = map[uint32]int{}, make([]uint32, l.nslots)
	}
	if on {
		l.inUse[i/64] |= 1 << (i % 64)
		l.nInUse.Add(1)
		l.byPID[pid], l.slotPID[i] = i, pid
		return
	}
	l.inUse[i/64] &^= 1 << (i % 64)
	l.nInUse.Add(-1)
	if p := l.slotPID[i]; l.byPID[p] == i {
		delete(l.byPID, p)
	}
	l.slotPID[i] = 0
}

// slotOf is the slot in use that pid claimed last (daemon side).
func (l *Ledger) slotOf(pid uint32) (int, bool) {
	i, ok := l.byPID[pid]
	return i, ok
}

// keepCopy makes this (daemon-side) ledger read its limits from a copy in
// memory, and drops the limits page from this process's mapping.
func (l *Ledger) keepCopy() {
	c := &limitsCopy{session: l.Session(), generation: l.Generation()}
	for g := 0; g < l.ngpus; g++ {
		c.uuids = append(c.uuids, unique.Make(l.UUID(g)).Value()) // one copy per node GPU
		c.limit = append(c.limit, l.Limit(g))
		c.phys = append(c.phys, l.Physical(g))
	}
	l.own = c
	unix.Madvise(l.lim, unix.MADV_DONTNEED)
}

// An idle ledger (no slot in use) of the daemon is frozen: its counters
// header is copied into memory and its pages leave the daemon's address
// space (they stay in the memfd). Lists, metrics and the sweep read the
// copy, so 10,000 idle sessions cost the daemon neither page faults nor
// RSS. Nothing may charge an idle session (only attached processes do);
// the first Claim thaws the ledger and re-bases used to 0, as the sweep
// does for an idle ledger.
type ctrCopy struct {
	used, peak, denied, reclaimed []uint64
}

// freeze copies the header of an idle ledger and drops its pages.
func (l *Ledger) freeze() {
	if l.own == nil || l.ctr == nil || l.NInUse() != 0 {
		return
	}
	c := &ctrCopy{}
	for g := 0; g < l.ngpus; g++ {
		c.used = append(c.used, atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffUsed)))
		c.peak = append(c.peak, atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffPeak)))
		c.denied = append(c.denied, atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffDenied)))
		c.reclaimed = append(c.reclaimed, atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffReclaimed)))
	}
	l.frozen.Store(c)
	l.closeHot()
	unix.Madvise(l.ctr, unix.MADV_DONTNEED)
}

// thaw reads the mapping again from now on; rebase sets used to 0 first.
func (l *Ledger) thaw(rebase bool) {
	if l.frozen.Load() == nil {
		return
	}
	if rebase {
		for g := 0; g < l.ngpus; g++ {
			atomic.StoreUint64(l.gpuCtr(g, CtrGPUOffUsed), 0)
			// no pass runs for an idle session: settled is even (a
			// pass that began while it was attached may have ended
			// after its last process left, uncounted)
			if v := atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffSettled)); v&1 != 0 {
				atomic.StoreUint64(l.gpuCtr(g, CtrGPUOffSettled), v+1)
			}
		}
	}
	l.frozen.Store(nil)
}

// FreezeIfIdle freezes a daemon-side ledger with no slot in use (the
// daemon calls it once a session is created or adopted; Rebase does it
// when the last process has gone).
func (l *Ledger) FreezeIfIdle() { l.freeze() }

// Frozen reports whether the ledger is idle and read from its copy.
func (l *Ledger) Frozen() bool { return l.frozen.Load() != nil }
