package reclaim

import (
	"time"
)

// The watched processes that exited lately, for a message that reaches
// gpusliced after the process that sent it has gone: the interceptor
// sends SHORT without waiting for the answer, and a process refused
// memory often exits at once (an out-of-memory error a framework does not
// handle), so gpusliced may read its SHORT after the watch has ended.
// An exit is noted under the same lock that ends the watch (Run,
// RemoveExited), so a key is always either watched (Watches) or noted
// (ExitedLately) until ExitGrace has passed. The record is bounded
// whatever exits: entries go after ExitGrace, and the oldest first past
// exitsMax (a storm of exits keeps the last ones).

// ExitGrace is how long an exited process is remembered.
const ExitGrace = 2 * time.Second

// exitsMax bounds the record.
const exitsMax = 4096

// exit is one exited process.
type exit struct {
	key Key
	at  time.Time
}

// exitLog is the record (guarded by Watcher.mu); its zero value is ready.
type exitLog struct {
	byPID map[uint32]exit
	q     []exit // in order of exit
}

// add notes that k's process exited at now.
func (l *exitLog) add(k Key, now time.Time) {
	l.expire(now)
	if len(l.q) >= exitsMax {
		l.pop()
	}
	if l.byPID == nil {
		l.byPID = map[uint32]exit{}
	}
	e := exit{key: k, at: now}
	l.byPID[k.PID] = e
	l.q = append(l.q, e)
}

// find returns the last process with pid that exited within ExitGrace of
// now.
func (l *exitLog) find(pid uint32, now time.Time) (Key, bool) {
	l.expire(now)
	e, ok := l.byPID[pid]
	return e.key, ok
}

// expire drops the entries older than ExitGrace.
func (l *exitLog) expire(now time.Time) {
	for len(l.q) > 0 && now.Sub(l.q[0].at) >= ExitGrace {
		l.pop()
	}
	if len(l.q) == 0 {
		l.q = nil // the backing array of a burst goes with it
	}
}

// pop drops the oldest entry (its pid's, unless a later exit of that pid
// replaced it).
func (l *exitLog) pop() {
	e := l.q[0]
	l.q = l.q[1:]
	if cur, ok := l.byPID[e.key.PID]; ok && cur == e {
		delete(l.byPID, e.key.PID)
	}
}

// ExitedLately returns the key of the watched process with pid that
// exited within ExitGrace, if any. No system call.
func (w *Watcher) ExitedLately(pid uint32) (Key, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exits.find(pid, time.Now())
}

// RemoveExited stops watching k, whose process the caller found dead
// before its exit was delivered (the /proc sweep), and notes the exit.
func (w *Watcher) RemoveExited(k Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if fd, ok := w.byKey[k]; ok {
		w.drop(fd, k)
		w.exits.add(k, time.Now())
	}
}
