package ledger

// The counters header as the daemon reads it (docs/ledger.md "Counters
// file"): per ledger GPU what is used, charged, peaked, denied and
// reclaimed, and the context cost the session's processes left.

import (
	"runtime"
	"sync/atomic"
)

func (l *Ledger) gpuCtr(g, field int) *uint64 {
	return u64(l.ctr, CtrOffGPU+g*CtrGPUStride+field)
}

// Used bytes on ledger GPU g: what the session's processes hold, exactly
// (gpu[g].used less the credit their threads keep).
//
// used and the credit are read apart, and the daemon's Reclaim of a dead
// process's slot changes them apart (the leases first, then used): a
// reader between the two would count the dead process's credit as held.
// So the reading is taken again while a slot is being reclaimed or used
// changed under it (docs/ledger.md "Credit"). The daemon itself reclaims
// under the session's lock and never races; the others (tests, clients)
// may.
func (l *Ledger) Used(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.used[g] // an idle ledger: no thread keeps credit
	}
	var raw, c uint64
	for try := 0; try < usedTries; try++ {
		raw = l.Charged(g)
		var reclaiming bool
		c, reclaiming = l.credit(g)
		if !reclaiming && l.Charged(g) == raw {
			break
		}
		runtime.Gosched()
	}
	if c >= raw {
		return 0
	}
	return raw - c
}

// usedTries bounds Used's readings: a reclaim takes microseconds, so this
// many only run out while the daemon is stopped in the middle of one; the
// last reading stands then.
const usedTries = 1000

// Charged is gpu[g].used as stored: what is allocated plus the credit the
// processes' threads keep (docs/ledger.md "Credit"); the CAS against the
// limit is on this figure.
func (l *Ledger) Charged(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.used[g]
	}
	return atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffUsed))
}

// Peak bytes on ledger GPU g.
func (l *Ledger) Peak(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.peak[g]
	}
	return atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffPeak))
}

// Denied allocations on ledger GPU g.
func (l *Ledger) Denied(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.denied[g]
	}
	return atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffDenied))
}

// Reclaimed bytes (from dead processes) on ledger GPU g.
func (l *Ledger) Reclaimed(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.reclaimed[g]
	}
	return atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffReclaimed))
}

// CtxCost is what a context costs on ledger GPU g as the session's first
// process to measure it left it (docs/ledger.md), and whether one did. A
// figure the session's processes wrote: it decides nothing in the daemon.
func (l *Ledger) CtxCost(g int) (uint64, bool) {
	if l.frozen.Load() != nil {
		return 0, false // an idle ledger's pages are not read
	}
	v := atomic.LoadUint64(l.gpuCtr(g, CtrGPUOffCtxCost))
	return v - 1, v != 0
}

// SetCtxCost leaves cost as ledger GPU g's context cost, as a process of
// the session does (the interceptor; tests).
func (l *Ledger) SetCtxCost(g int, cost uint64) {
	atomic.StoreUint64(l.gpuCtr(g, CtrGPUOffCtxCost), cost+1)
}
