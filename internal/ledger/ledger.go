package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors.
var (
	ErrNoSlot  = errors.New("no free slot in the session ledger")
	ErrInvalid = errors.New("invalid ledger file")
	ErrQuota   = errors.New("allocation exceeds the session's limit")
)

// GPU describes one ledger GPU at creation.
type GPU struct {
	UUID     string
	Limit    uint64
	Physical uint64
}

// Ledger is one session's mapped ledger. The daemon maps limits read-write;
// a client (Map) maps them read-only. Counter and slot access is atomic.
type Ledger struct {
	lim      []byte
	ctr      []byte
	limFile  *os.File // O_RDONLY: the fd handed to clients; nil when fdless
	ctrFile  *os.File // O_RDWR; nil when fdless
	limPath  string
	ctrPath  string
	ngpus    int
	nslots   int
	writable bool
	// fdless: the daemon holds the memfds only through its mappings and
	// opens them from /proc/self/map_files when a client attaches, so idle
	// sessions cost no fd.
	fdless bool
	// inUse is a bitmap of the non-free slots on the daemon side (the daemon
	// is the only writer of slot states), so that scans never touch the
	// pages of unused slots: those pages are never written, stay holes of
	// the memfd and cost no memory. Nil for client mappings.
	inUse  []uint64
	nInUse atomic.Int32 // readable without the caller's lock
	// own is set on the daemon's ledgers (Create, Adopt): the daemon is the
	// only writer of the limits, so it reads them from this copy and keeps
	// the limits page out of its address space (Drop).
	own *limitsCopy
	// frozen is the copy of an idle ledger's counters header (freeze).
	frozen atomic.Pointer[ctrCopy]
}

// Paths returns the limits and counters file paths of session id in dir.
func Paths(dir, id string) (limits, counters string) {
	return filepath.Join(dir, id+".limits"), filepath.Join(dir, id+".counters")
}

// Create makes a fresh ledger for session id: two sealed memfds (their size
// can never change, so no holder of an fd can make a mapping fault or
// fill a filesystem), mapped, with root-only links <dir>/<id>.limits and
// .counters to them for inspection (docs/ledger.md). The counters file is
// sized for nslots slots but only its header page is written: a slot's
// pages cost memory from the first process that claims it on.
func Create(dir, id string, gpus []GPU, nslots int) (*Ledger, error) {
	if len(gpus) == 0 || len(gpus) > MaxGPUs {
		return nil, fmt.Errorf("ledger %s: %d GPUs (want 1..%d)", id, len(gpus), MaxGPUs)
	}
	if len(id) == 0 || len(id) >= SessionLen {
		return nil, fmt.Errorf("ledger: session id length %d (want 1..%d)", len(id), SessionLen-1)
	}
	if nslots <= 0 || nslots > MaxSlots {
		return nil, fmt.Errorf("ledger %s: %d slots (want 1..%d)", id, nslots, MaxSlots)
	}
	limPath, ctrPath := Paths(dir, id)
	lim := make([]byte, LimitsSize)
	le := binary.LittleEndian
	le.PutUint32(lim[LimOffMagic:], LimitsMagic)
	le.PutUint32(lim[LimOffVersion:], Version)
	le.PutUint32(lim[LimOffNGPUs:], uint32(len(gpus)))
	copy(lim[LimOffSession:LimOffSession+SessionLen-1], id)
	for g, gpu := range gpus {
		if len(gpu.UUID) >= UUIDLen {
			return nil, fmt.Errorf("ledger %s: GPU UUID %q too long", id, gpu.UUID)
		}
		base := LimOffGPU + g*LimGPUStride
		copy(lim[base+LimGPUOffUUID:base+LimGPUOffUUID+UUIDLen-1], gpu.UUID)
		le.PutUint64(lim[base+LimGPUOffLimit:], gpu.Limit)
		le.PutUint64(lim[base+LimGPUOffPhys:], gpu.Physical)
	}
	ctr := make([]byte, CtrHdrStructSize)
	le.PutUint32(ctr[CtrOffMagic:], CountersMagic)
	le.PutUint32(ctr[CtrOffVersion:], Version)
	le.PutUint32(ctr[CtrOffNGPUs:], uint32(len(gpus)))
	le.PutUint32(ctr[CtrOffNSlots:], uint32(nslots))
	limF, err := newSealed(memfdName(dir, id, "limits"), lim, LimitsSize)
	if err != nil {
		return nil, err
	}
	defer limF.Close()
	ctrF, err := newSealed(memfdName(dir, id, "counters"), ctr, CountersSize(nslots))
	if err != nil {
		return nil, err
	}
	defer ctrF.Close()
	l, err := fromFiles(id, limF, ctrF, true)
	if err != nil {
		return nil, err
	}
	if err := l.link(limPath, ctrPath); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Open maps an existing ledger of session id in dir for the daemon
// (limits read-write) and validates its headers.
func Open(dir, id string) (*Ledger, error) {
	limPath, ctrPath := Paths(dir, id)
	limRW, err := os.OpenFile(limPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	defer limRW.Close()
	limRO, err := os.OpenFile(limPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	ctrF, err := os.OpenFile(ctrPath, os.O_RDWR, 0)
	if err != nil {
		limRO.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	l, err := mapFiles(limRW, ctrF, true)
	if err != nil {
		limRO.Close()
		ctrF.Close()
		return nil, fmt.Errorf("ledger %s: %w", id, err)
	}
	l.limFile, l.ctrFile = limRO, ctrF
	l.limPath, l.ctrPath = "", "" // the daemon's links: not this caller's to remove
	l.initInUse(ctrF)
	if got := l.Session(); got != id {
		l.Close()
		return nil, fmt.Errorf("ledger %s: %w: names session %q", id, ErrInvalid, got)
	}
	return l, nil
}

// Map maps ledger files received over IPC, as a client does: limits
// PROT_READ, counters read-write. The files stay owned by the caller.
func Map(limits, counters *os.File) (*Ledger, error) {
	return mapFiles(limits, counters, false)
}

func mapFiles(limF, ctrF *os.File, limWritable bool) (*Ledger, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(limF.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat limits: %w", err)
	}
	if st.Size != LimitsSize {
		return nil, fmt.Errorf("%w: limits file is %d bytes, want %d", ErrInvalid, st.Size, LimitsSize)
	}
	prot := unix.PROT_READ
	if limWritable {
		prot |= unix.PROT_WRITE
	}
	lim, err := unix.Mmap(int(limF.Fd()), 0, LimitsSize, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap limits: %w", err)
	}
	fail := func(err error) (*Ledger, error) {
		unix.Munmap(lim)
		return nil, err
	}
	le := binary.LittleEndian
	if le.Uint32(lim[LimOffMagic:]) != LimitsMagic || le.Uint32(lim[LimOffVersion:]) != Version {
		return fail(fmt.Errorf("%w: limits magic/version", ErrInvalid))
	}
	ngpus := int(le.Uint32(lim[LimOffNGPUs:]))
	if ngpus < 1 || ngpus > MaxGPUs {
		return fail(fmt.Errorf("%w: ngpus %d", ErrInvalid, ngpus))
	}
	if err := unix.Fstat(int(ctrF.Fd()), &st); err != nil {
		return fail(fmt.Errorf("stat counters: %w", err))
	}
	if st.Size < CountersHdrSize+SlotSize || st.Size > int64(CountersSize(MaxSlots)) {
		return fail(fmt.Errorf("%w: counters file is %d bytes", ErrInvalid, st.Size))
	}
	ctr, err := unix.Mmap(int(ctrF.Fd()), 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap counters: %w", err))
	}
	nslots := int(le.Uint32(ctr[CtrOffNSlots:]))
	if le.Uint32(ctr[CtrOffMagic:]) != CountersMagic || le.Uint32(ctr[CtrOffVersion:]) != Version ||
		int(le.Uint32(ctr[CtrOffNGPUs:])) != ngpus || CountersSize(nslots) != int(st.Size) {
		unix.Munmap(ctr)
		return fail(fmt.Errorf("%w: counters header does not match", ErrInvalid))
	}
	return &Ledger{lim: lim, ctr: ctr, ngpus: ngpus, nslots: nslots, writable: limWritable}, nil
}

// Close unmaps the ledger and closes its files (the files stay on disk).
func (l *Ledger) Close() error {
	var errs []error
	if l.lim != nil {
		errs = append(errs, unix.Munmap(l.lim))
		l.lim = nil
	}
	if l.ctr != nil {
		errs = append(errs, unix.Munmap(l.ctr))
		l.ctr = nil
	}
	if l.limFile != nil {
		errs = append(errs, l.limFile.Close())
	}
	if l.ctrFile != nil {
		errs = append(errs, l.ctrFile.Close())
	}
	l.limFile, l.ctrFile = nil, nil
	return errors.Join(errs...)
}

// Remove closes the ledger and deletes its links (the memfds go with the
// last process that maps them).
func (l *Ledger) Remove() error {
	err := l.Close()
	if l.limPath != "" {
		if e := os.Remove(l.limPath); e != nil && !errors.Is(e, os.ErrNotExist) {
			err = errors.Join(err, e)
		}
		if e := os.Remove(l.ctrPath); e != nil && !errors.Is(e, os.ErrNotExist) {
			err = errors.Join(err, e)
		}
	}
	return err
}

// NGPUs is the number of ledger GPUs.
func (l *Ledger) NGPUs() int { return l.ngpus }

// NSlots is the number of process slots.
func (l *Ledger) NSlots() int { return l.nslots }

func u64(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }
func u32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// Session is the session id stored in the limits file.
func (l *Ledger) Session() string {
	if l.own != nil {
		return l.own.session
	}
	s := l.lim[LimOffSession : LimOffSession+SessionLen]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// UUID of ledger GPU g.
func (l *Ledger) UUID(g int) string {
	if l.own != nil {
		return l.own.uuids[g]
	}
	base := LimOffGPU + g*LimGPUStride + LimGPUOffUUID
	s := l.lim[base : base+UUIDLen]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// Generation counts limit changes.
func (l *Ledger) Generation() uint64 {
	if l.own != nil {
		return l.own.generation
	}
	return atomic.LoadUint64(u64(l.lim, LimOffGeneration))
}

// Limit of ledger GPU g in bytes.
func (l *Ledger) Limit(g int) uint64 {
	if l.own != nil {
		return l.own.limit[g]
	}
	return atomic.LoadUint64(u64(l.lim, LimOffGPU+g*LimGPUStride+LimGPUOffLimit))
}

// Physical memory of ledger GPU g in bytes.
func (l *Ledger) Physical(g int) uint64 {
	if l.own != nil {
		return l.own.phys[g]
	}
	return atomic.LoadUint64(u64(l.lim, LimOffGPU+g*LimGPUStride+LimGPUOffPhys))
}

// SetLimits stores new limits (one per ledger GPU) and then bumps the
// generation, as docs/ledger.md requires.
func (l *Ledger) SetLimits(limits []uint64) error {
	if !l.writable {
		return errors.New("ledger: limits are mapped read-only")
	}
	if len(limits) != l.ngpus {
		return fmt.Errorf("ledger: %d limits for %d GPUs", len(limits), l.ngpus)
	}
	for g, v := range limits {
		atomic.StoreUint64(u64(l.lim, LimOffGPU+g*LimGPUStride+LimGPUOffLimit), v)
	}
	gen := atomic.AddUint64(u64(l.lim, LimOffGeneration), 1)
	if l.own != nil {
		copy(l.own.limit, limits)
		l.own.generation = gen
		unix.Madvise(l.lim, unix.MADV_DONTNEED)
	}
	return nil
}

func (l *Ledger) gpuCtr(g, field int) *uint64 {
	return u64(l.ctr, CtrOffGPU+g*CtrGPUStride+field)
}

// Used bytes on ledger GPU g: what the session's processes hold, exactly
// (gpu[g].used less the credit their threads keep).
func (l *Ledger) Used(g int) uint64 {
	if c := l.frozen.Load(); c != nil {
		return c.used[g] // an idle ledger: no thread keeps credit
	}
	raw := l.Charged(g)
	c := l.Credit(g)
	if c >= raw {
		return 0
	}
	return raw - c
}

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

func (l *Ledger) slot(i, off int) int { return CountersHdrSize + i*SlotSize + off }

// stripeOff is the offset of field off of slot i's stripe k.
func (l *Ledger) stripeOff(i, k, off int) int { return l.slot(i, SlotOffStripe+k*SlotStripeStride+off) }

// held is slot i's held counter for ledger GPU g in stripe k.
func (l *Ledger) held(i, k, g int) *uint64 { return u64(l.ctr, l.stripeOff(i, k, StripeOffHeld+8*g)) }

// lease is slot i's share of used for ledger GPU g in stripe k.
func (l *Ledger) lease(i, k, g int) *uint64 { return u64(l.ctr, l.stripeOff(i, k, StripeOffLease+8*g)) }

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
	var sum uint64
	if l.inUse != nil {
		for _, i := range l.InUse() {
			sum += l.slotCredit(i, g)
		}
		return sum
	}
	for i := 0; i < l.nslots; i++ {
		sum += l.slotCredit(i, g)
	}
	return sum
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
	for _, i := range l.InUse() {
		st, p := l.SlotState(i)
		if st == SlotAttached && p == pid &&
			atomic.LoadUint64(u64(l.ctr, l.slot(i, SlotOffStartTime))) == startTime {
			return i, true, nil
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
	i := free
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
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffPID)), pid)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffStartTime)), startTime)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffAttachNS)), attachNS)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffState)), SlotAttached)
	if l.inUse != nil {
		l.setUsed(i, true)
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
// per ledger GPU.
func (l *Ledger) Reclaim(i int) []uint64 {
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
		if v := net(held); v != 0 {
			atomic.AddUint64(l.gpuCtr(g, CtrGPUOffReclaimed), v)
			out[g] = v
		}
	}
	for k := 0; k < SlotStripes; k++ {
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffOwner)), 0)
		atomic.StoreUint32(u32(l.ctr, l.stripeOff(i, k, StripeOffBusy)), 0)
		atomic.StoreUint64(u64(l.ctr, l.stripeOff(i, k, StripeOffRevoke)), 0)
	}
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffPID)), 0)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffStartTime)), 0)
	atomic.StoreUint64(u64(l.ctr, l.slot(i, SlotOffAttachNS)), 0)
	atomic.StoreUint32(u32(l.ctr, l.slot(i, SlotOffState)), SlotFree)
	if l.inUse != nil && l.used(i) {
		l.setUsed(i, false)
	}
	return out
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
			peak := l.gpuCtr(g, CtrGPUOffPeak)
			for {
				p := atomic.LoadUint64(peak)
				if cur+n <= p || atomic.CompareAndSwapUint64(peak, p, cur+n) {
					return nil
				}
			}
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
