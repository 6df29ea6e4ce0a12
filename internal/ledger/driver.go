package ledger

// Driver memory (docs/ledger.md "Driver memory"): what the driver holds
// for a process beyond what its hooks charged (modules it loads lazily,
// library handles, its own rounding) is charged by the daemon to the
// process's slot, on its shared stripe, from the audit's per-process
// figures. The daemon keeps its own account of what it charged (the job
// can write the stripe); the stripe only carries the charge, so that the
// reservations of the session's processes see it and the slot's reclaim
// gives it back with the rest.

import (
	"math"
	"sync/atomic"
)

// SlotUsed is what slot i holds on ledger GPU g (its stripes' held).
func (l *Ledger) SlotUsed(i, g int) uint64 { return l.slotUsed(i, g) }

// ChargeDriver moves the driver memory charged to slot i on ledger GPU g
// from was to now: the difference is added to (or taken from) the slot's
// shared stripe and used, over the limit if need be (the memory exists;
// the audit decides). The counters header's driver figure follows.
func (l *Ledger) ChargeDriver(i, g int, was, now uint64) {
	if was == now {
		return
	}
	l.thaw(false)
	sh, used, drv := l.held(i, SlotShared, g), l.gpuCtr(g, CtrGPUOffUsed), l.gpuCtr(g, CtrGPUOffDriver)
	lease := l.lease(i, SlotShared, g)
	if now > was {
		d := now - was
		atomic.AddUint64(sh, d)
		atomic.AddUint64(lease, d)
		atomic.AddUint64(drv, d)
		l.raisePeak(g, atomic.AddUint64(used, d))
		return
	}
	d := was - now
	atomic.AddUint64(sh, -d)
	atomic.AddUint64(lease, -d)
	subSaturating(drv, d)
	subSaturating(used, d)
}

// ForgetDriver takes n bytes of driver memory off the header's figure:
// the slot that carried them was reclaimed (its stripes, with the charge,
// went back with it).
func (l *Ledger) ForgetDriver(g int, n uint64) {
	if n != 0 && l.frozen.Load() == nil {
		subSaturating(l.gpuCtr(g, CtrGPUOffDriver), n)
	}
}

// Driver is the driver memory charged on ledger GPU g, as the header says
// (a figure the job's processes can write: for display only).
func (l *Ledger) Driver(g int) uint64 {
	if l.frozen.Load() != nil {
		return 0
	}
	v := atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffDriver))
	if v > math.MaxInt64 {
		return 0
	}
	return v
}

// MarkSettled counts one audit pass on ledger GPU g: a process waiting
// for one (it sent SHORT before a reservation near the limit) goes on.
func (l *Ledger) MarkSettled(g int) {
	if l.frozen.Load() == nil {
		atomic.AddUint64(l.gpuCtr(g, CtrGPUOffSettled), 1)
	}
}
