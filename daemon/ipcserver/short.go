package ipcserver

// SHORT (ipc.TypeShort): the driver refused a process an allocation its
// quota allowed, or a reservation near the limit waits for the driver's
// figure; gpusliced audits out of turn (docs/protocol.md "SHORT",
// docs/daemon.md "Audit"). A pass costs the daemon in proportion to the
// processes on the GPUs, so who may ask for one, and how often, is bounded
// here:
//   - only a process attached to a session is heard: the peer pid
//     (SO_PEERCRED) must be one the daemon registered at ATTACH (or
//     re-adopted), and the process now holding that pid must be the one
//     that connected (SO_PEERPIDFD, or its start time) and the one that
//     attached (its start time). Anyone else is answered
//     ipc.CodeNotAttached and nothing is audited;
//   - per process: one SHORT per ShortProcessGap is taken (the
//     interceptor sends at most one every 20 ms); more are answered OK
//     and dropped;
//   - per uid: at most one pass per ShortUIDGap, whatever the number of
//     its processes. A SHORT inside the window is answered OK and folded
//     into one pass asked for at the window's end, so a process waiting
//     for a pass begun after its ask (the interceptor's settle) still
//     gets one. While that pass is pending, a SHORT costs a map look-up.
//
// The audit loop adds its own bound (audit.Loop.MinGap) over all uids.

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// Rate limits of SHORT (see above).
const (
	ShortProcessGap = 20 * time.Millisecond
	ShortUIDGap     = 100 * time.Millisecond
)

// shortWarnEvery bounds the warnings about refused SHORTs.
const shortWarnEvery = 10 * time.Second

// shortLimiter holds the per-process and per-uid state of SHORT. Its
// zero value is ready (gaps from the constants, the real clock).
type shortLimiter struct {
	pidGap, uidGap time.Duration               // 0: ShortProcessGap, ShortUIDGap
	after          func(time.Duration, func()) // nil: time.AfterFunc

	mu       sync.Mutex
	pids     map[uint32]pidShort
	uids     map[uint32]*uidShort
	pruned   time.Time
	lastWarn time.Time
}

// pidShort: when a process's SHORT was last taken, and the attachment it
// was checked against.
type pidShort struct {
	at  time.Time
	key reclaim.Key
}

// uidShort: the uid's next pass may be asked for from next on; pending:
// one is asked for at next already.
type uidShort struct {
	next    time.Time
	pending bool
}

// shortStep is what a SHORT leads to.
type shortStep int

const (
	shortDrop    shortStep = iota // answered OK, nothing more
	shortCheck                    // check the peer, then take it (shortLimiter.take)
	shortCovered                  // a pass the uid asked for begins after now
)

func (l *shortLimiter) gaps() (pid, uid time.Duration) {
	pid, uid = l.pidGap, l.uidGap
	if pid <= 0 {
		pid = ShortProcessGap
	}
	if uid <= 0 {
		uid = ShortUIDGap
	}
	return pid, uid
}

// look decides what a SHORT from attached process k of uid at now needs,
// before any system call.
func (l *shortLimiter) look(uid uint32, k reclaim.Key, now time.Time) shortStep {
	pidGap, _ := l.gaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pids[k.PID]; ok && p.key == k && now.Sub(p.at) < pidGap {
		return shortDrop
	}
	if u := l.uids[uid]; u != nil && u.pending {
		return shortCovered
	}
	return shortCheck
}

// take counts a SHORT from k (checked) of uid at now: it calls kick now
// when the uid's window is open, else once at the window's end (once for
// all the SHORTs until then). It reports whether it kicked now.
func (l *shortLimiter) take(uid uint32, k reclaim.Key, now time.Time, kick func()) bool {
	pidGap, uidGap := l.gaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pids == nil {
		l.pids, l.uids = map[uint32]pidShort{}, map[uint32]*uidShort{}
	}
	if now.Sub(l.pruned) > time.Second {
		l.pruned = now
		for pid, p := range l.pids {
			if now.Sub(p.at) >= pidGap {
				delete(l.pids, pid)
			}
		}
		for u, s := range l.uids {
			if !s.pending && !now.Before(s.next) {
				delete(l.uids, u)
			}
		}
	}
	l.pids[k.PID] = pidShort{at: now, key: k}
	u := l.uids[uid]
	if u == nil {
		u = &uidShort{}
		l.uids[uid] = u
	}
	switch {
	case u.pending:
		return false
	case !now.Before(u.next):
		u.next = now.Add(uidGap)
		kick()
		return true
	}
	u.pending = true
	after := l.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	at := u.next
	after(at.Sub(now), func() {
		l.mu.Lock()
		u.pending = false
		u.next = at.Add(uidGap)
		l.mu.Unlock()
		kick()
	})
	return false
}

// warnNow says whether a refusal is logged as a warning (at most one per
// shortWarnEvery).
func (l *shortLimiter) warnNow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastWarn) < shortWarnEvery {
		return false
	}
	l.lastWarn = now
	return true
}

// handleShort answers a SHORT (see the top of this file): refused unless
// the peer is an attached process, else OK, asking for a pass within the
// rate limits.
func (s *Server) handleShort(cc *conn, req ipc.Request) error {
	uid, pid := cc.cred.Uid, uint32(cc.cred.Pid)
	k, ok := s.m.AttachedProcess(uid, pid)
	if !ok {
		return s.refuseShort(cc, req, errNotAttached)
	}
	if s.short.look(uid, k, time.Now()) == shortCheck {
		if err := s.shortPeer(cc, k); err != nil {
			return s.refuseShort(cc, req, fmt.Errorf("not the process attached to session %s: %w", k.Session, err))
		}
		s.short.take(uid, k, time.Now(), s.kick)
		s.opt.Log.Debug("ipc: a process was refused memory its quota allowed: auditing",
			"gpu", string(req.GPU), "session", k.Session, "pid", pid, "uid", uid)
	}
	// else dropped (the process's excess) or covered by a pass the uid
	// asked for already
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypeOK, nil)
	return cc.write(cc.out)
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
// as k: it still holds k.PID (peerCheck) and started when k's did.
func (s *Server) shortPeer(cc *conn, k reclaim.Key) error {
	start, err := reclaim.StartTime(k.PID)
	if err != nil {
		return err
	}
	if start != k.StartTime {
		return fmt.Errorf("pid %d now names another process", k.PID)
	}
	return s.peerCheck(cc)(start)
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
