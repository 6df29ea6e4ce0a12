package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// hot holds the fds an fd-less ledger opened for its first attach
	// since it was thawed (when hotOpen): later attaches duplicate them (an
	// open through /proc walks a path; a dup does not), and freezing
	// closes them, so only sessions with processes attached hold fds. Raw
	// fds, not *os.File: the attach path then makes no fcntl or epoll call
	// of its own for them (os wraps every file for its poller).
	hot     [2]int
	hotOpen bool
	// inUse is a bitmap of the non-free slots on the daemon side (the daemon
	// is the only writer of slot states), so that scans never touch the
	// pages of unused slots: those pages are never written, stay holes of
	// the memfd and cost no memory. Nil for client mappings.
	inUse []uint64
	// byPID and slotPID are the daemon's own record of which pid holds
	// which slot in use, so that Claim finds a process attaching again
	// without reading every slot.
	byPID   map[uint32]int
	slotPID []uint32
	nInUse  atomic.Int32 // readable without the caller's lock
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
	l.closeHot()
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
