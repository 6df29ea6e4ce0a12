package session

// Driver memory (docs/ledger.md "Driver memory"): at every read of the
// audit, each attached process is charged what the driver's per-process
// figure holds beyond what its hooks charged: the modules a framework's
// kernels load lazily, cuBLAS and cuDNN handles, NCCL's and the driver's
// own structures. None of it goes through an allocation entry point, and
// on a GPU it is tens to hundreds of MiB per process. Charged on the
// process's slot, it is what the session's next reservations see, so a job
// gets out-of-memory at its quota by the driver's figure instead of being
// stopped by the audit; the slot's reclaim gives it back.
//
// An allocation is charged before the driver makes it and a free given
// back after the driver frees, so the driver's figure less what the hooks
// held at the same instant never exceeds the driver's own memory. The
// hooks' figure at that instant is not read, only before and after: a
// process that allocates and frees in between held more than either
// reading. What the hooks held meanwhile is at most the first reading
// plus the bytes the slot's raised counters grew by (every byte added to
// a held is counted there): an increase is charged from that bound, once
// two reads in a row agree, so it never exceeds the driver's memory. A
// decrease is charged at once, from the larger of the two readings.

import (
	"math"

	"github.com/gpuslice/gpuslice/daemon/audit"
)

// driverAcct is what the daemon charged one attached process.
type driverAcct struct {
	pid     uint32
	charged []uint64 // per ledger GPU: on the slot's shared stripe
	last    []uint64 // per ledger GPU: the previous read's bound (what it could charge)
	hooks   []uint64 // per ledger GPU: the hooks' charges just before the read
	raised  uint64   // the slot's raised counters just before hooks was read
	marked  bool     // hooks and raised were read before this read (Mark)
}

// driverMemory is the audit's Driver for the manager's sessions.
type driverMemory struct {
	m       *Manager
	passing []*Session // the sessions Begin counted (the audit loop's goroutine only)
}

// DriverMemory returns the audit.Driver that charges the sessions'
// processes their driver memory.
func (m *Manager) DriverMemory() audit.Driver { return &driverMemory{m: m} }

// Mark notes what each attached process's hooks have charged.
func (d *driverMemory) Mark() {
	d.m.eachAttached(func(s *Session, slot int, pid uint32) {
		a := s.driverAcctLocked(slot, pid)
		a.raised = s.led.SlotRaised(slot) // before held: ledger.SlotRaised
		for g := range a.hooks {
			a.hooks[g] = s.hooksHeld(slot, g, a)
		}
		a.marked = true
	})
}

// Charge moves each attached process's driver charge to what this read
// shows: down at once, up to what this read and the one before agree on.
// It returns whether a figure is above its charge (a confirming read
// would charge it).
func (d *driverMemory) Charge(usage []audit.Attributed) (grew bool) {
	type key struct {
		pid uint32
		gpu int
	}
	seen := make(map[key]uint64, len(usage))
	for _, u := range usage {
		if u.Session != "" {
			seen[key{u.PID, u.GPU}] += u.Bytes
		}
	}
	d.m.eachAttached(func(s *Session, slot int, pid uint32) {
		a := s.driverAcctLocked(slot, pid)
		grown := s.led.SlotRaised(slot) - a.raised
		for g, gi := range s.gidx {
			var bound, point uint64 // the driver's figure less the hooks': sound, and as read
			if gi >= 0 {
				b, after := seen[key{pid, gi}], s.hooksHeld(slot, g, a)
				if a.marked && grown <= math.MaxInt64 {
					// hooks is below 2^63 too (a slot's net): the sum cannot
					// wrap. after too: an interceptor from before raised
					// counts nothing
					bound = b - min(b, max(a.hooks[g]+grown, after))
				}
				point = b - min(b, max(a.hooks[g], after))
			}
			// up to what this read and the one before allow; down at once
			want := max(min(bound, a.last[g]), min(a.charged[g], point))
			a.last[g] = bound
			s.led.ChargeDriver(slot, g, a.charged[g], want)
			a.charged[g] = want
			grew = grew || bound > want
		}
		a.marked = false
	})
	return grew
}

// Begin and Settle count a pass on the GPUs of every session with a
// process attached when it began, once at its start and once at its end
// (the count is odd while a pass runs): a process that asked for a pass
// (SHORT) waits for the end of one begun after its ask.
func (d *driverMemory) Begin() {
	d.passing = d.passing[:0]
	d.m.eachAttached(func(s *Session, _ int, _ uint32) {
		if len(d.passing) == 0 || d.passing[len(d.passing)-1] != s {
			d.passing = append(d.passing, s)
			s.markSettledLocked()
		}
	})
}

// Settle: see Begin.
func (d *driverMemory) Settle() {
	for _, s := range d.passing {
		s.mu.Lock()
		s.markSettledLocked()
		s.mu.Unlock()
	}
	d.passing = d.passing[:0]
}

// markSettledLocked counts half a pass on s's GPUs. Caller holds s.mu.
func (s *Session) markSettledLocked() {
	if !s.released {
		for g := range s.gidx {
			s.led.MarkSettled(g)
		}
	}
}

// eachAttached calls fn for every attached process of every live session,
// under the session's lock.
func (m *Manager) eachAttached(fn func(s *Session, slot int, pid uint32)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, s := range m.sessions {
		if s.led.NInUse() == 0 {
			continue
		}
		s.mu.Lock()
		if !s.released {
			for _, slot := range s.led.InUse() {
				if _, pid := s.led.SlotState(slot); pid != 0 {
					fn(s, slot, pid)
				}
			}
		}
		s.mu.Unlock()
	}
}

// driverAcctLocked is slot's account, new when the slot changed hands.
// Caller holds s.mu.
func (s *Session) driverAcctLocked(slot int, pid uint32) *driverAcct {
	a := s.drv[slot]
	if a != nil && a.pid == pid {
		return a
	}
	if a != nil {
		s.forgetDriverLocked(slot) // a new process in a slot not reclaimed yet
	}
	n := len(s.gidx)
	a = &driverAcct{pid: pid, charged: make([]uint64, n), last: make([]uint64, n), hooks: make([]uint64, n)}
	if s.drv == nil {
		s.drv = map[int]*driverAcct{}
	}
	s.drv[slot] = a
	return a
}

// hooksHeld is what slot's hooks hold on ledger GPU g: the slot's charges
// less the daemon's own.
func (s *Session) hooksHeld(slot, g int, a *driverAcct) uint64 {
	h := s.led.SlotUsed(slot, g)
	if h < a.charged[g] {
		return 0
	}
	return h - a.charged[g]
}

// driverChargedLocked is what the daemon charged slot's process (the
// one attached there now) per ledger GPU, nil when nothing. Caller holds
// s.mu.
func (s *Session) driverChargedLocked(slot int) []uint64 {
	a := s.drv[slot]
	if a == nil {
		return nil
	}
	if _, pid := s.led.SlotState(slot); pid != a.pid {
		return nil
	}
	return a.charged
}

// forgetDriverLocked drops slot's account. Its charges left with the
// slot's stripes when it was reclaimed; a slot still attached gives them
// back here. Caller holds s.mu.
func (s *Session) forgetDriverLocked(slot int) {
	a := s.drv[slot]
	if a == nil {
		return
	}
	delete(s.drv, slot)
	if st, pid := s.led.SlotState(slot); pid == a.pid && st != 0 {
		for g, c := range a.charged {
			s.led.ChargeDriver(slot, g, c, 0)
		}
		return
	}
	for g, c := range a.charged {
		s.led.ForgetDriver(g, c)
	}
}
