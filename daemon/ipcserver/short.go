package ipcserver

// SHORT (ipc.TypeShort): the driver refused a process an allocation its
// quota allowed, or a reservation near the limit waits for the driver's
// figure; gpusliced audits out of turn (docs/protocol.md "SHORT",
// docs/audit.md "Audit"). A pass costs the daemon in proportion to the
// processes on the GPUs, so who may ask for one, and how often, is bounded
// here:
//   - only a process attached to a session is heard: the peer pid
//     (SO_PEERCRED) must be one the daemon registered at ATTACH (or
//     re-adopted), and the process now holding that pid must be the one
//     that connected (SO_PEERPIDFD, or its start time) and the one that
//     attached (its start time). The interceptor does not wait for the
//     answer, and a process refused memory often exits at once: a SHORT
//     read after its sender has gone is heard when the pid was attached
//     to a session of the peer's uid until it exited, within
//     reclaim.ExitGrace, and the process that connected has exited too.
//     Anyone else is answered ipc.CodeNotAttached and nothing is audited;
//   - per process: one SHORT per ShortProcessGap is taken (the
//     interceptor sends at most one every 20 ms); more are answered OK
//     and dropped;
//   - a refusal gpusliced finds real (shortReal: the driver has less
//     free on that GPU than the session may still take, so something
//     holds memory promised to it) asks for a pass at once: at most one
//     per GPU per ShortGPUGap, whoever asks. The state it checks is the
//     GPU's, not the asker's: once the audit has stopped what held the
//     memory, more SHORTs are not real and fall to the uid's limit;
//   - any other SHORT: per uid, at most one pass per ShortUIDGap,
//     whatever the number of its processes.
//
// In a window (a GPU's, a uid's), a SHORT is answered OK and folded into
// one pass asked for at the window's end, so a process waiting for a
// pass begun after its ask (the interceptor's settle) still gets one.
// While that pass is pending, a SHORT costs map look-ups. The audit loop
// adds its own bound (audit.Loop.MinGap) over all GPUs and uids.

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// handleShort answers a SHORT (see the top of this file): refused unless
// the peer is an attached process (or one that was, until it exited
// lately), else OK, asking for a pass within the rate limits: the GPU's
// for a refusal found real, else the uid's.
func (s *Server) handleShort(cc *conn, req ipc.Request) error {
	uid, pid := cc.cred.Uid, uint32(cc.cred.Pid)
	k, ok := s.m.AttachedProcess(uid, pid)
	if !ok {
		k, ok = s.m.ExitedProcess(uid, pid)
	}
	if !ok {
		return s.refuseShort(cc, req, errNotAttached)
	}
	if step := s.short.look(uid, k, time.Now()); step != shortDrop {
		g, real := s.shortReal(k, string(req.GPU))
		var take func(now time.Time)
		switch {
		case real && !s.short.gpuPending(g):
			take = func(now time.Time) { s.short.takeGPU(g, k, now, s.kick) }
		case !real && step == shortCheck:
			take = func(now time.Time) { s.short.take(uid, k, now, s.kick) }
		}
		// else covered by a pass asked for already (the GPU's, or the
		// uid's), which begins after now
		if take != nil {
			if err := s.shortPeer(cc, k); err != nil {
				return s.refuseShort(cc, req, fmt.Errorf("not the process attached to session %s: %w", k.Session, err))
			}
			take(time.Now())
			s.opt.Log.Debug("ipc: a process was refused memory its quota allowed: auditing",
				"gpu", string(req.GPU), "session", k.Session, "pid", pid, "uid", uid, "short_now", real)
		}
	}
	// else dropped: the process's excess
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypeOK, nil)
	return cc.write(cc.out)
}

// shortFreeAge is how long the driver's free figure of a GPU serves
// shortReal (at most one NVML read per GPU per shortFreeAge, whatever
// the number of SHORTs).
const shortFreeAge = 5 * time.Millisecond

// shortReal reports whether the SHORT of k's process about the GPU with
// uuid is a refusal gpusliced finds real: the session has a quota there
// and the driver has less free on that GPU than the session may still
// take (its quota less what its ledger counts used): the GPU is short of
// memory promised to the session, which the audit finds only where
// something holds more than it may. It returns the GPU's inventory
// index. Without Options.Free, no SHORT is found real.
func (s *Server) shortReal(k reclaim.Key, uuid string) (gpu int, real bool) {
	if s.opt.Free == nil {
		return -1, false
	}
	unused, g, ok := s.m.Unused(k.Session, uuid)
	if !ok || unused == 0 {
		return -1, false
	}
	if s.short.gpuPending(g) {
		return g, true // a pass is asked for already: no read
	}
	now := time.Now()
	s.freeMu.Lock()
	defer s.freeMu.Unlock()
	f, ok := s.free[g]
	if !ok || now.Sub(f.at) >= shortFreeAge {
		b, err := s.opt.Free(g)
		if err != nil {
			return -1, false
		}
		f = freeRead{at: now, bytes: b}
		if s.free == nil {
			s.free = map[int]freeRead{}
		}
		s.free[g] = f
	}
	return g, f.bytes < unused
}

// freeRead is one read of a GPU's free memory (shortReal).
type freeRead struct {
	at    time.Time
	bytes uint64
}

// errNotAttached: the peer pid is attached to no session.
var (
	errNotAttached = errors.New("the process is attached to no session")
	notAttachedMsg = "SHORT ignored: " + errNotAttached.Error()
)

// kick asks the audit for a pass.
func (s *Server) kick() {
	if s.opt.Short != nil {
		s.opt.Short()
	}
}

// shortPeer checks that the process that connected is the one attached
// as k. While k's process lives, the one that connected must be it: it
// still holds k.PID (peerCheck) and started when k's did. Once k's
// process has exited, the one that connected must have exited too
// (shortPeerGone).
func (s *Server) shortPeer(cc *conn, k reclaim.Key) error {
	start, err := reclaim.StartTime(k.PID)
	switch {
	case err == nil && start == k.StartTime:
		err = s.peerCheck(cc)(start)
		if errors.Is(err, session.ErrPeerGone) && !reclaim.Alive(k.PID, k.StartTime) {
			return s.shortPeerGone(cc, k) // it has exited since it connected
		}
		return err
	case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ESRCH):
		return s.shortPeerGone(cc, k) // the pid names another process, or none
	}
	return err
}

// shortPeerGone accepts a SHORT that k's process sent before it exited
// (the interceptor does not wait for the answer, and a process refused
// memory often ends at once): the process that connected is gone too
// (SO_PEERPIDFD; on older kernels, the pid holds no process with the
// start time read at accept, which was k's). Its pid and uid were k's
// when it connected (SO_PEERCRED), and k exited within
// session.ExitGrace or is found dead now: the sender was k's process,
// or a process of the same user given that pid and gone since.
func (s *Server) shortPeerGone(cc *conn, k reclaim.Key) error {
	if !s.pidfds {
		if cc.peerStart != 0 && (cc.peerStart != k.StartTime || reclaim.Alive(k.PID, cc.peerStart)) {
			return fmt.Errorf("pid %d connected as another process", k.PID)
		}
		return nil
	}
	fd, err := peerPidfd(cc.c)
	if errors.Is(err, unix.ESRCH) {
		return nil // reaped already
	}
	if err != nil {
		return fmt.Errorf("SO_PEERPIDFD: %w", err)
	}
	defer unix.Close(fd)
	gone, err := reclaim.PidfdExited(fd)
	if err != nil {
		return fmt.Errorf("poll the peer's pidfd: %w", err)
	}
	if !gone {
		return fmt.Errorf("pid %d's process exited; the one that connected has not", k.PID)
	}
	return nil
}

// refuseShort answers a SHORT that is not heard; the connection stays.
func (s *Server) refuseShort(cc *conn, req ipc.Request, why error) error {
	if s.short.warnNow(time.Now()) {
		s.opt.Log.Warn("ipc: SHORT from a process that is not attached to a session; nothing audited (logged once per 10s)",
			"pid", cc.cred.Pid, "uid", cc.cred.Uid, "gpu", string(req.GPU), "why", why)
	}
	if why == errNotAttached {
		return cc.writeError(ipc.CodeNotAttached, notAttachedMsg)
	}
	return cc.writeError(ipc.CodeNotAttached, "SHORT ignored: "+why.Error())
}
