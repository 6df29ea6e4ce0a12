package ledger

// The ledger's process slots (docs/ledger.md "Counters file"): their
// stripes, what each holds and keeps as credit, claiming a slot for an
// attaching process, reclaiming a dead one's, and the Go clients' charges.

import (
	"math"
	"slices"
	"sync/atomic"
)

func (l *Ledger) slot(i, off int) int { return CountersHdrSize + i*SlotSize + off }

// stripeOff is the offset of field off of slot i's stripe k.
func (l *Ledger) stripeOff(i, k, off int) int { return l.slot(i, SlotOffStripe+k*SlotStripeStride+off) }

// held is slot i's held counter for ledger GPU g in stripe k.
func (l *Ledger) held(i, k, g int) *uint64 { return u64(l.ctr, l.stripeOff(i, k, StripeOffHeld+8*g)) }

// lease is slot i's share of used for ledger GPU g in stripe k.
func (l *Ledger) lease(i, k, g int) *uint64 { return u64(l.ctr, l.stripeOff(i, k, StripeOffLease+8*g)) }

// raised is slot i's count of the bytes ever added to stripe k's held
// counters, on every GPU (wrapping).
func (l *Ledger) raised(i, k int) *uint64 { return u64(l.ctr, l.stripeOff(i, k, StripeOffRaised)) }

// SlotRaised is the bytes ever added to what slot i holds, on every GPU,
// modulo 2^64 (its stripes' raised counters). What the slot held at any
// moment between two reads is at most what the first read of SlotUsed
// found plus what SlotRaised grew by meanwhile, provided SlotRaised is
// read before SlotUsed: a process raises it after the held it adds to
// (docs/ledger.md "Driver memory").
func (l *Ledger) SlotRaised(i int) uint64 {
	var sum uint64
	for k := 0; k < SlotStripes; k++ {
		sum += atomic.LoadUint64(l.raised(i, k))
	}
	return sum
}

// net is a slot's sum over its stripes (modulo 2^64, as they wrap): above
// 2^63 it is a net release, which counts as nothing held.
func net(sum uint64) uint64 {
	if sum > math.MaxInt64 {
		return 0
	}
	return sum
}

// slotUsed is what slot i holds on ledger GPU g.
func (l *Ledger) slotUsed(i, g int) uint64 {
	var sum uint64
	for k := 0; k < SlotStripes; k++ {
		sum += atomic.LoadUint64(l.held(i, k, g))
	}
	return net(sum)
}

// slotCredit is the credit slot i's threads keep on ledger GPU g: bytes
// counted in used that no allocation holds (docs/ledger.md "Credit").
func (l *Ledger) slotCredit(i, g int) uint64 {
	var sum uint64
	for k := 0; k < SlotOwned; k++ {
		c := atomic.LoadUint64(l.lease(i, k, g)) - atomic.LoadUint64(l.held(i, k, g))
		if c <= math.MaxInt64 {
			sum += c
		}
	}
	return sum
}

// Credit is the credit all slots keep on ledger GPU g. A free slot keeps
// nothing; the daemon reads only the slots it has handed out (their pages
// alone are touched, initInUse), a client every slot.
func (l *Ledger) Credit(g int) uint64 {
	c, _ := l.credit(g)
	return c
}

// credit is Credit, and whether a slot was being reclaimed when its
// credit had been read (its state is read after its leases: Reclaim
// marks the slot before it exchanges them and frees it after used has
// lost them).
func (l *Ledger) credit(g int) (sum uint64, reclaiming bool) {
	one := func(i int) {
		sum += l.slotCredit(i, g)
		if atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffState))) == SlotReclaiming {
			reclaiming = true
		}
	}
	if l.inUse != nil {
		for _, i := range l.InUse() {
			one(i)
		}
		return sum, reclaiming
	}
	for i := 0; i < l.nslots; i++ {
		one(i)
	}
	return sum, reclaiming
}

// Slot is a snapshot of one process slot.
type Slot struct {
	Index     int
	PID       uint32
	State     uint32
	StartTime uint64
	AttachNS  uint64
	Used      []uint64 // per ledger GPU
}

// Slot reads slot i.
func (l *Ledger) Slot(i int) Slot {
	s := Slot{
		Index:     i,
		PID:       atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffPID))),
		State:     atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffState))),
		StartTime: atomic.LoadUint64(u64(l.ctr, l.slot(i, SlotOffStartTime))),
		AttachNS:  atomic.LoadUint64(u64(l.ctr, l.slot(i, SlotOffAttachNS))),
		Used:      make([]uint64, l.ngpus),
	}
	for g := range s.Used {
		s.Used[g] = l.slotUsed(i, g)
	}
	return s
}

// StripeOwners are the thread ids owning slot i's per-thread stripes
// (docs/ledger.md "Credit"), 0 where a stripe has no owner.
func (l *Ledger) StripeOwners(i int) [SlotOwned]uint32 {
	var o [SlotOwned]uint32
	for k := range o {
		o[k] = atomic.LoadUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffOwner)))
	}
	return o
}

// SlotState returns the state and pid of slot i without allocating. On the
// daemon side a slot its bitmap says is free is not read (reading a slot
// page never written would allocate it).
func (l *Ledger) SlotState(i int) (state, pid uint32) {
	if l.inUse != nil && !l.used(i) {
		return SlotFree, 0
	}
	return atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffState))),
		atomic.LoadUint32(u32(l.ctr, l.slot(i, SlotOffPID)))
}

// InUse lists the indices of non-free slots.
func (l *Ledger) InUse() []int {
	if l.inUse != nil && l.nInUse.Load() == 0 {
		return nil // idle: most of 10,000 sessions in a list
	}
	var out []int
	for i := 0; i < l.nslots; i++ {
		if l.inUse != nil {
			if l.inUse[i/64] == 0 {
				i |= 63 // the next 64 slots are free
				continue
			}
			if l.used(i) {
				out = append(out, i)
			}
		} else if st, _ := l.SlotState(i); st != SlotFree {
			out = append(out, i)
		}
	}
	return out
}

// NInUse is the number of non-free slots (daemon side); safe without the
// lock that serialises Claim and Reclaim.
func (l *Ledger) NInUse() int {
	if l.inUse == nil {
		return len(l.InUse())
	}
	return int(l.nInUse.Load())
}

// Attached lists the non-free slots.
func (l *Ledger) Attached() []Slot {
	var out []Slot
	for _, i := range l.InUse() {
		out = append(out, l.Slot(i))
	}
	return out
}

// Claim registers pid in a slot (daemon side): the pid's existing attached
// slot if it has one (same start time), else the first free slot. The
// caller serialises Claim, Release and Reclaim for one ledger.
func (l *Ledger) Claim(pid uint32, startTime, attachNS uint64) (int, bool, error) {
	same := func(i int) bool {
		st, p := l.SlotState(i)
		return st == SlotAttached && p == pid &&
			atomic.LoadUint64(u64(l.ctr, l.slot(i, SlotOffStartTime))) == startTime
	}
	// The daemon's record names the slot a pid claimed last; only when it
	// names another process of that pid (a pid reused while an older slot
	// waits for its reclaim) is every slot in use read.
	i, ok := l.slotOf(pid)
	if ok && same(i) {
		return i, true, nil
	}
	if ok || l.inUse == nil {
		for _, i := range l.InUse() {
			if same(i) {
				return i, true, nil
			}
		}
	}
	free := -1
	for i := 0; i < l.nslots; i++ {
		if l.inUse != nil {
			if l.inUse[i/64] == math.MaxUint64 {
				i |= 63
				continue
			}
			if !l.used(i) {
				free = i
				break
			}
			continue
		}
		if l.inUse == nil {
			if st, _ := l.SlotState(i); st == SlotFree {
				free = i
				break
			}
		}
	}
	if free < 0 {
		return -1, false, ErrNoSlot
	}
	l.thaw(true)
	i = free
	if hwm := u32(l.ctr, CtrOffSlotHWM); atomic.LoadUint32(hwm) < uint32(i+1) {
		atomic.StoreUint32(hwm, uint32(i+1))
	}
	for k := 0; k < SlotStripes; k++ {
		for g := 0; g < MaxGPUs; g++ {
			atomic.StoreUint64(l.held(i, k, g), 0)
			atomic.StoreUint64(l.lease(i, k, g), 0)
		}
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffBusy)), 0)
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffOwner)), 0)
		atomic.StoreUint64(u64(l.ctr, l.stripeOff(i, k, StripeOffRevoke)), 0)
	}
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffOwned)), 0)
	l.clearCreditMark(i)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffPID)), pid)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffStartTime)), startTime)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffAttachNS)), attachNS)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffState)), SlotAttached)
	if l.inUse != nil {
		l.setUsed(i, true, pid)
	}
	return i, false, nil
}

// reclaimMark is what the daemon writes into a stripe's revoke word while
// it reclaims the slot (an interceptor writes its pid, below 2^32).
const reclaimMark = 1 << 40

// Reclaim gives back what slot i holds (docs/ledger.md "Reclaim"): the slot
// goes to reclaiming; each owned stripe is marked against processes taking
// its credit back (its revoke word, never waited for); every
// stripe's lease (its share of used: held plus credit) is exchanged with 0
// and the sum subtracted from used, and what the stripes held is added to
// reclaimed; then the slot is freed. It returns the bytes the process held
// per ledger GPU. own[g] (nil: none) is what the daemon itself charged the
// slot on GPU g (driver memory, ChargeDriver): given back with the rest,
// it is no memory the process held through its hooks, and is neither
// counted as reclaimed nor returned.
func (l *Ledger) Reclaim(i int, own []uint64) []uint64 {
	out := make([]uint64, l.ngpus)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffState)), SlotReclaiming)
	// Mark the owned stripes so that a process of the session that starts
	// taking their credit back now leaves them alone. The daemon never
	// waits on these words (the job can write them): a taker already at
	// work can at worst make the session's own used lower than it should
	// be, which decides nothing (the audit is the authority).
	for k := 0; k < SlotOwned; k++ {
		atomic.CompareAndSwapUint64(u64(l.ctr, l.stripeOff(i, k, StripeOffRevoke)), 0, reclaimMark)
	}
	for g := 0; g < l.ngpus; g++ {
		var lease, held uint64
		for k := 0; k < SlotStripes; k++ {
			lease += atomic.SwapUint64(l.lease(i, k, g), 0)
			held += atomic.SwapUint64(l.held(i, k, g), 0)
		}
		if v := net(lease); v != 0 {
			subSaturating(l.gpuCtr(g, CtrGPUOffUsed), v)
		}
		v := net(held)
		if g < len(own) {
			v -= min(v, own[g])
		}
		if v != 0 {
			atomic.AddUint64(l.gpuCtr(g, CtrGPUOffReclaimed), v)
			out[g] = v
		}
	}
	for k := 0; k < SlotStripes; k++ {
		atomic.StoreUint64(l.raised(i, k), 0)
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffOwner)), 0)
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffBusy)), 0)
		atomic.StoreUint64(u64(l.ctr, l.stripeOff(i, k, StripeOffRevoke)), 0)
	}
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffPID)), 0)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffStartTime)), 0)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffAttachNS)), 0)
	l.clearCreditMark(i)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffState)), SlotFree)
	if l.inUse != nil && l.used(i) {
		l.setUsed(i, false, 0)
	}
	return out
}

// clearCreditMark clears slot i's bit in the credit map (its process sets
// it before its threads first keep credit: the interceptor's credit scans
// read only marked slots). Only the daemon clears, when the slot is freed
// or claimed again; it never reads the map (the job can write it).
func (l *Ledger) clearCreditMark(i int) {
	if i >= CreditMapSlots {
		return
	}
	w := u64(l.ctr, CtrOffCreditMap+8*(i/64))
	if bit := uint64(1) << (i % 64); atomic.LoadUint64(w)&bit != 0 {
		atomic.AndUint64(w, ^bit)
	}
}

// Rebase sets used to 0 on every GPU. Call it only when no slot is
// attached (used then equals the sum of the slots, all 0).
func (l *Ledger) Rebase() {
	if c := l.frozen.Load(); c != nil {
		if slices.ContainsFunc(c.used, func(v uint64) bool { return v != 0 }) {
			n := *c
			n.used = make([]uint64, l.ngpus)
			l.frozen.Store(&n)
		}
		return
	}
	defer l.freeze()
	for g := 0; g < l.ngpus; g++ {
		atomic.StoreUint64(l.gpuCtr(g, CtrGPUOffUsed), 0)
		atomic.StoreUint64(l.gpuCtr(g, CtrGPUOffDriver), 0)
	}
}

// raisePeak makes ledger GPU g's peak at least v (CAS-max).
func (l *Ledger) raisePeak(g int, v uint64) {
	peak := l.gpuCtr(g, CtrGPUOffPeak)
	for {
		p := atomic.LoadUint64(peak)
		if v <= p || atomic.CompareAndSwapUint64(peak, p, v) {
			return
		}
	}
}

func subSaturating(p *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(p)
		nv := uint64(0)
		if old > v {
			nv = old - v
		}
		if atomic.CompareAndSwapUint64(p, old, nv) {
			return
		}
	}
}

// Reserve charges n bytes on ledger GPU g to slot i, exactly as the
// interceptor's exact path does (docs/ledger.md), on the slot's shared
// stripe.
// Used by Go clients and tests.
func (l *Ledger) Reserve(i, g int, n uint64) error {
	l.thaw(false)
	used := l.gpuCtr(g, CtrGPUOffUsed)
	limit := l.Limit(g)
	for {
		cur := atomic.LoadUint64(used)
		if n > math.MaxUint64-cur || cur+n > limit {
			atomic.AddUint64(l.gpuCtr(g, CtrGPUOffDenied), 1)
			return ErrQuota
		}
		if atomic.CompareAndSwapUint64(used, cur, cur+n) {
			atomic.AddUint64(l.lease(i, SlotShared, g), n)
			atomic.AddUint64(l.held(i, SlotShared, g), n)
			atomic.AddUint64(l.raised(i, SlotShared), n) // after held: SlotRaised
			l.raisePeak(g, cur+n)
			return nil
		}
	}
}

// Release gives back n bytes charged to slot i on ledger GPU g, as the
// interceptor does: subtracted from the stripe (which may wrap) and from
// used, which stops at 0, so bytes the daemon already reclaimed are never
// subtracted twice.
func (l *Ledger) Release(i, g int, n uint64) {
	atomic.AddUint64(l.held(i, SlotShared, g), -n)
	atomic.AddUint64(l.lease(i, SlotShared, g), -n)
	subSaturating(l.gpuCtr(g, CtrGPUOffUsed), n)
}
