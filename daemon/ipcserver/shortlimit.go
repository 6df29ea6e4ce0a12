package ipcserver

// The rate limits of SHORT (short.go): per process, per uid, and per GPU
// for the refusals gpusliced finds real.

import (
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
)

// Rate limits of SHORT (short.go).
const (
	ShortProcessGap = 20 * time.Millisecond
	ShortUIDGap     = 100 * time.Millisecond
	ShortGPUGap     = 20 * time.Millisecond
)

// shortWarnEvery bounds the warnings about refused SHORTs.
const shortWarnEvery = 10 * time.Second

// shortLimiter holds the per-process, per-uid and per-GPU state of SHORT.
// Its zero value is ready (gaps from the constants, the real clock).
type shortLimiter struct {
	pidGap, uidGap, gpuGap time.Duration               // 0: ShortProcessGap, ShortUIDGap, ShortGPUGap
	after                  func(time.Duration, func()) // nil: time.AfterFunc

	mu       sync.Mutex
	pids     map[uint32]pidShort
	uids     map[uint32]*window
	gpus     map[int]*window // by inventory index: at most one per GPU
	pruned   time.Time
	lastWarn time.Time
}

// pidShort: when a process's SHORT was last taken, and the attachment it
// was checked against.
type pidShort struct {
	at  time.Time
	key reclaim.Key
}

// window is a uid's or a GPU's: its next pass may be asked for from next
// on; pending: one is asked for at next already.
type window struct {
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

func (l *shortLimiter) gaps() (pid, uid, gpu time.Duration) {
	pid, uid, gpu = l.pidGap, l.uidGap, l.gpuGap
	if pid <= 0 {
		pid = ShortProcessGap
	}
	if uid <= 0 {
		uid = ShortUIDGap
	}
	if gpu <= 0 {
		gpu = ShortGPUGap
	}
	return pid, uid, gpu
}

// look decides what a SHORT from attached process k of uid at now needs,
// before any system call. Unless dropped, the SHORT counts as the
// process's one for ShortProcessGap, whatever it leads to: each process
// costs more than a map look-up at most that often.
func (l *shortLimiter) look(uid uint32, k reclaim.Key, now time.Time) shortStep {
	pidGap, _, _ := l.gaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pids[k.PID]; ok && p.key == k && now.Sub(p.at) < pidGap {
		return shortDrop
	}
	l.noteLocked(k, now)
	if u := l.uids[uid]; u != nil && u.pending {
		return shortCovered
	}
	return shortCheck
}

// gpuPending reports whether a pass for a refusal found real on GPU gpu
// is asked for already (it begins after now).
func (l *shortLimiter) gpuPending(gpu int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.gpus[gpu]
	return w != nil && w.pending
}

// take counts a SHORT from k (checked) of uid at now: it calls kick now
// when the uid's window is open, else once at the window's end (once for
// all the SHORTs until then). It reports whether it kicked now.
func (l *shortLimiter) take(uid uint32, k reclaim.Key, now time.Time, kick func()) bool {
	_, uidGap, _ := l.gaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteLocked(k, now)
	u := l.uids[uid]
	if u == nil {
		u = &window{}
		l.uids[uid] = u
	}
	return l.openLocked(u, uidGap, now, kick)
}

// takeGPU is take for a refusal found real on GPU gpu (inventory index):
// the GPU's window instead of the uid's, whoever asks.
func (l *shortLimiter) takeGPU(gpu int, k reclaim.Key, now time.Time, kick func()) bool {
	_, _, gpuGap := l.gaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteLocked(k, now)
	w := l.gpus[gpu]
	if w == nil {
		w = &window{}
		l.gpus[gpu] = w
	}
	return l.openLocked(w, gpuGap, now, kick)
}

// noteLocked records that k's SHORT was taken at now, and prunes the
// maps once a second. Caller holds mu.
func (l *shortLimiter) noteLocked(k reclaim.Key, now time.Time) {
	pidGap, _, _ := l.gaps()
	if l.pids == nil {
		l.pids, l.uids, l.gpus = map[uint32]pidShort{}, map[uint32]*window{}, map[int]*window{}
	}
	if now.Sub(l.pruned) > time.Second {
		l.pruned = now
		for pid, p := range l.pids {
			if now.Sub(p.at) >= pidGap {
				delete(l.pids, pid)
			}
		}
		for u, w := range l.uids {
			if !w.pending && !now.Before(w.next) {
				delete(l.uids, u)
			}
		}
	}
	l.pids[k.PID] = pidShort{at: now, key: k}
}

// openLocked asks for a pass in window w (gap apart): now when it is
// open, else one at its end for every ask until then. Caller holds mu.
func (l *shortLimiter) openLocked(w *window, gap time.Duration, now time.Time, kick func()) bool {
	switch {
	case w.pending:
		return false
	case !now.Before(w.next):
		w.next = now.Add(gap)
		kick()
		return true
	}
	w.pending = true
	after := l.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	at := w.next
	after(at.Sub(now), func() {
		l.mu.Lock()
		w.pending = false
		w.next = at.Add(gap)
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
