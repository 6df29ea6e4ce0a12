// Package compute shares GPU time between the sessions on each GPU
// (docs/compute-share.md): it measures each session's GPU time
// from the driver (NVML per-process utilisation), decides which sessions
// are ahead of their share, and publishes the decision on the compute page
// that the interceptor's launch gate reads.
package compute

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The page's layout: native/include/gpuslice_compute.h.
const (
	pageMagic    = 0x50435347 // "GSCP"
	pageVersion  = 1
	pageSessions = 4096
	hdrSize      = 64
	sessSize     = 128
	nameLen      = 64
	// PageSize is the compute page's size in bytes.
	PageSize = hdrSize + pageSessions*sessSize
)

// Page is the compute page: <runtime_dir>/compute, mode 0644, written only
// by gpusliced. Slots are kept across restarts (the file lives in the
// runtime dir, like the ledgers), so attached processes keep theirs.
type Page struct {
	mu    sync.Mutex
	mem   []byte
	ro    *os.File // read-only, handed to attaching processes (FD)
	slots map[string]int
	free  []int
}

// OpenPage maps path, making it when missing or not a page of this layout.
func OpenPage(path string) (*Page, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open compute page: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(0o644); err != nil {
		return nil, fmt.Errorf("compute page mode: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	fresh := st.Size() != PageSize
	if fresh {
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		if err := f.Truncate(PageSize); err != nil {
			return nil, fmt.Errorf("size compute page: %w", err)
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, PageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map compute page: %w", err)
	}
	ro, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("open compute page read-only: %w", err)
	}
	p := &Page{mem: mem, ro: ro, slots: map[string]int{}}
	le := binary.LittleEndian
	if fresh || le.Uint32(mem[0:]) != pageMagic || le.Uint32(mem[4:]) != pageVersion ||
		le.Uint32(mem[8:]) != pageSessions {
		for i := range mem {
			mem[i] = 0
		}
		le.PutUint32(mem[4:], pageVersion)
		le.PutUint32(mem[8:], pageSessions)
		atomic.StoreUint32(p.word32(0), pageMagic)
	}
	for i := pageSessions - 1; i >= 0; i-- {
		if atomic.LoadUint64(p.gen(i)) != 0 && p.name(i) != "" {
			p.slots[p.name(i)] = i
			continue
		}
		p.free = append(p.free, i)
	}
	return p, nil
}

func (p *Page) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.mem[off])) }
func (p *Page) word64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&p.mem[off])) }
func (p *Page) throttle(i int) *uint64 { return p.word64(hdrSize + i*sessSize) }
func (p *Page) gen(i int) *uint64      { return p.word64(hdrSize + i*sessSize + 8) }

func (p *Page) name(i int) string {
	b := p.mem[hdrSize+i*sessSize+16 : hdrSize+i*sessSize+16+nameLen]
	for j, c := range b {
		if c == 0 {
			return string(b[:j])
		}
	}
	return string(b)
}

// Assign gives session id a slot (the one it has, if any): its processes'
// gates find it by name when they attach. False when the page is full or
// the name does not fit (the session's launches are then never gated).
func (p *Page) Assign(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.slots[id]; ok {
		return true
	}
	if len(id) == 0 || len(id) >= nameLen || len(p.free) == 0 {
		return false
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	atomic.StoreUint64(p.throttle(i), 0)
	b := p.mem[hdrSize+i*sessSize+16 : hdrSize+i*sessSize+16+nameLen]
	for j := range b {
		b[j] = 0
	}
	copy(b, id)
	atomic.AddUint64(p.gen(i), 1) // published after the name (atomics order the stores)
	p.slots[id] = i
	return true
}

// Release frees id's slot: its gates stop waiting (the generation moves).
func (p *Page) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.slots[id]
	if !ok {
		return
	}
	atomic.StoreUint64(p.throttle(i), 0)
	atomic.AddUint64(p.gen(i), 1)
	p.mem[hdrSize+i*sessSize+16] = 0
	delete(p.slots, id)
	p.free = append(p.free, i)
}

// FD is a read-only descriptor of the page, handed to a process at
// ATTACH (ipcserver): a job maps the page it is given, never one found
// through a path its environment names.
func (p *Page) FD() int { return int(p.ro.Fd()) }

// Slot is id's slot and the slot's generation (false: id has none).
func (p *Page) Slot(id string) (uint32, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.slots[id]
	if !ok {
		return 0, 0, false
	}
	return uint32(i), atomic.LoadUint64(p.gen(i)), true
}

// Assigned lists the sessions holding a slot.
func (p *Page) Assigned() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.slots))
	for id := range p.slots {
		out = append(out, id)
	}
	return out
}

// SetThrottle publishes id's throttle bits (bit g: the session's ledger GPU g).
func (p *Page) SetThrottle(id string, bits uint64) {
	p.mu.Lock()
	i, ok := p.slots[id]
	p.mu.Unlock()
	if ok && atomic.LoadUint64(p.throttle(i)) != bits {
		atomic.StoreUint64(p.throttle(i), bits)
	}
}

// Throttle reads id's bits (tests, status).
func (p *Page) Throttle(id string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.slots[id]; ok {
		return atomic.LoadUint64(p.throttle(i))
	}
	return 0
}

// Beat marks the page fresh: gates ignore a throttle whose page has not
// beaten for 2 s.
func (p *Page) Beat() { atomic.AddUint64(p.word64(16), 1) }

// Close unmaps the page (the file stays for the next daemon).
func (p *Page) Close() error {
	p.ro.Close()
	return syscall.Munmap(p.mem)
}
