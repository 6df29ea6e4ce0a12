package session

import (
	"errors"
	"fmt"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"golang.org/x/sys/unix"
)

// Attachment is what an ATTACH returns; the caller closes it.
type Attachment struct {
	Session    string // the session attached to
	Slot       int
	NGPUs      int
	Generation uint64
	Limits     int // fd: the ledger's limits, read-only
	Counters   int // fd: its counters, read-write
}

// JobOf is the Slurm job pid runs in, decided from the kernel
// (Options.Identity); "" when none or when no resolver is configured.
func (m *Manager) JobOf(pid uint32) string {
	if m.opt.Identity == nil {
		return ""
	}
	job, _ := m.opt.Identity(pid, 0)
	return job
}

// PeerCheck confirms, once Attach holds a pidfd of the process now
// numbered pid (whose start time it is given), that this process is the
// one that made the connection the ATTACH came on: a pid taken by the
// kernel when the connection was made may have been given to another
// process since (the connecting process exited, its child sent the
// ATTACH). nil checks nothing (callers inside the daemon).
type PeerCheck func(start uint64) error

// ErrPeerGone: the process that made the connection is not the one that
// now holds its pid.
var ErrPeerGone = errors.New("the process that connected has exited")

// Attach registers pid (with the peer uid) in a session. When pid runs in
// a Slurm job (Options.Identity, from the kernel), that job's session is
// the one, whatever id the process named; a job without a session gets
// ErrNoSession. Outside Slurm the named id is used (gpuslice run); naming
// none is ErrNoSession.
func (m *Manager) Attach(id string, uid, pid uint32, peer PeerCheck) (Attachment, error) {
	// One read of /proc/<pid>/stat for the parent, the start time and the
	// image (an image read while an exec is still under way is 0, unknown:
	// below, never a wrong image), made through a pidfd that then watches
	// the process.
	pidfd, proc, err := reclaim.OpenProc(pid)
	if err != nil {
		if errors.Is(err, reclaim.ErrGone) {
			return Attachment{}, fmt.Errorf("process %d exited during attach", pid)
		}
		return Attachment{}, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	watched := false
	defer func() {
		if !watched {
			unix.Close(pidfd)
		}
	}()
	// After the pidfd: if the connecting process is alive now, it held pid
	// when the pidfd was opened, so the pidfd is its.
	if peer != nil {
		if err := peer(proc.Start); err != nil {
			return Attachment{}, fmt.Errorf("%w: pid %d: %w", ErrNotPermitted, pid, err)
		}
	}
	if m.opt.Identity != nil {
		if job, how := m.opt.Identity(pid, proc.PPID); job != "" {
			if id != job && id != "" {
				m.opt.Log.Info("attach: the session named by the process is not its Slurm job's; using the job's",
					"pid", pid, "named", id, "job", job, "by", how)
			}
			m.mu.RLock()
			_, ok := m.sessions[job]
			m.mu.RUnlock()
			if !ok {
				return Attachment{}, fmt.Errorf("%w: process %d runs in Slurm job %s, which has no gpuslice session", ErrNoSession, pid, job)
			}
			id = job
		}
	}
	if id == "" {
		return Attachment{}, fmt.Errorf("%w: process %d runs in no Slurm job and named no session", ErrNoSession, pid)
	}
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if !ok {
		return Attachment{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if uid != 0 && uid != s.uid {
		return Attachment{}, fmt.Errorf("%w: session %q belongs to uid %d, not %d", ErrNotPermitted, id, s.uid, uid)
	}
	start, img := proc.Start, proc.Image
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return Attachment{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if s.deleting {
		return Attachment{}, fmt.Errorf("%w: session %q is being deleted", api.ErrNotFound, id)
	}
	now := uint64(m.opt.Now().UnixNano())
	slot, again, err := s.led.Claim(pid, start, now)
	if err != nil {
		return Attachment{}, err
	}
	if again {
		// The same process attaching a second time. After an exec (a new
		// program image: the kernel gave it a new stack, so its argument
		// and environment addresses moved) the old image's memory was
		// freed by the driver: its charge is given back and the new image
		// starts from an empty slot. The same image attaching again keeps
		// its slot and every byte charged to it: a second ATTACH never
		// uncharges memory that is still allocated.
		// A token of 0 is unknown (unreadable, or read while the kernel
		// was still setting up an exec's new stack): an unknown token
		// never proves a new image, and a known one replaces it.
		if old, ok := s.images[slot]; ok && (img == 0 || old == 0 || old == img) {
			if old == 0 {
				s.images[slot] = img
			}
			m.opt.Log.Info("second attach of the same image keeps its charge", "session", id, "pid", pid, "slot", slot)
			return m.attachmentLocked(s, slot)
		}
		m.watcher.Remove(reclaim.Key{Session: id, Slot: slot, PID: pid, StartTime: start})
		m.reclaimSlotLocked(s, slot)
		if slot, _, err = s.led.Claim(pid, start, now); err != nil {
			return Attachment{}, err
		}
	}
	s.images[slot] = img
	k := reclaim.Key{Session: id, Slot: slot, PID: pid, StartTime: start}
	watched = true
	if err := m.watcher.AddPidfd(k, pidfd); err != nil {
		if errors.Is(err, reclaim.ErrGone) {
			m.reclaimSlotLocked(s, slot)
			return Attachment{}, fmt.Errorf("process %d exited during attach", pid)
		}
		m.opt.Log.Warn("pidfd watch failed; relying on the /proc sweep", "pid", pid, "err", err)
	}
	m.opt.Log.Debug("attached", "session", id, "pid", pid, "slot", slot, "new_image", again)
	return m.attachmentLocked(s, slot)
}

// attachmentLocked opens the ledger files for slot. Caller holds s.mu: a
// concurrent release unmaps the ledger, and a file of a released ledger
// must never be sent.
func (m *Manager) attachmentLocked(s *Session, slot int) (Attachment, error) {
	lim, ctr, err := s.led.OpenFiles()
	if err != nil {
		return Attachment{}, fmt.Errorf("session %s: %w", s.rec.ID, err)
	}
	return Attachment{Session: s.rec.ID, Slot: slot, NGPUs: s.led.NGPUs(), Generation: s.led.Generation(),
		Limits: lim, Counters: ctr}, nil
}

// Close closes the attachment's fds (after they were sent). A zero
// Attachment (an error's) has none: its 0s are not fds it owns (the
// ledger's are 3 or above).
func (a Attachment) Close() {
	for _, fd := range []int{a.Limits, a.Counters} {
		if fd > 2 {
			unix.Close(fd)
		}
	}
}

// Detach acknowledges that pid is done with its slot when that slot is
// pid's. It gives nothing back: what the process allocated may still be
// allocated (nothing the process says proves otherwise), so its slot and
// charge stay until the process has exited (pidfd or /proc sweep).
func (m *Manager) Detach(hint string, slot int, pid uint32) error {
	m.mu.RLock()
	var cands []*Session
	if s, ok := m.sessions[hint]; ok {
		cands = append(cands, s)
	} else {
		for _, s := range m.sessions {
			cands = append(cands, s)
		}
	}
	m.mu.RUnlock()
	for _, s := range cands {
		s.mu.Lock()
		if slot >= 0 && slot < s.led.NSlots() && !s.released {
			st, p := s.led.SlotState(slot)
			if st == ledger.SlotAttached && p == pid {
				s.mu.Unlock()
				m.opt.Log.Debug("detach acknowledged; the slot is freed when the process exits", "session", s.rec.ID, "pid", pid, "slot", slot)
				return nil
			}
		}
		s.mu.Unlock()
	}
	return fmt.Errorf("%w: slot %d is not attached by pid %d", ErrNotPermitted, slot, pid)
}

// CheckOwner applies the attach ownership rule for STATUS.
func (m *Manager) CheckOwner(id string, uid uint32) error {
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if uid != 0 && uid != s.uid {
		return fmt.Errorf("%w: session %q belongs to uid %d, not %d", ErrNotPermitted, id, s.uid, uid)
	}
	return nil
}

// reclaimSlotLocked gives back slot's bytes and re-bases the ledger when no
