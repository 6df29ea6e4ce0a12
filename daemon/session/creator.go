package session

// A session made by `gpuslice run` lives with the process that made it
// (api.SessionRequest.CreatorPID, checked by the admin API against the
// socket's peer): the run releases it when its command is done, and when
// the run's process is gone without doing so (SIGKILL, the OOM killer, a
// crash) gpusliced does: it kills what is left in the run's cgroup
// (gpuslice-run-<id>, as the run itself would), removes the cgroup and
// releases the session ("abandoned"). The creator is watched by a pidfd in
// the same epoll set as attached processes (a watcher key with slot
// creatorSlot) and again after a restart (its pid and start time are in
// the session's record). A session bound to one process is never handed
// to another create: two runs never share a session, whatever --id they
// name.

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/runcgroup"
	"golang.org/x/sys/unix"
)

// RunCgroupRoot is where the cgroup hierarchy is mounted; a run's cgroup
// is below it where `gpuslice run` makes it.
var RunCgroupRoot = "/sys/fs/cgroup"

// creatorKillWait bounds the wait for an abandoned run's processes to be
// gone once killed.
const creatorKillWait = 30 * time.Second

// creatorSlot marks the watcher key of a session's creator (ledger slots
// are never negative).
const creatorSlot = -1

// Creator is the process a session is created for, as the admin API
// found it: the pid of the socket's peer, and the start time of the
// process that had that pid when it connected (0: not read).
type Creator struct {
	PID   uint32
	Start uint64
}

// CreateFor creates session req for creator c and binds it to c: released
// by gpusliced when c exits without releasing it. A session of that id
// that exists and is not c's is a conflict (api.ErrConflict), also when
// its owner and quotas are the same; c's own is returned as it is.
func (m *Manager) CreateFor(req api.SessionRequest, c Creator) (api.Session, bool, error) {
	fd, proc, err := reclaim.OpenProc(c.PID)
	if err == nil && c.Start != 0 && proc.Start != c.Start {
		unix.Close(fd)
		err = reclaim.ErrGone // the pid is another process's now
	}
	if errors.Is(err, reclaim.ErrGone) {
		return api.Session{}, false, fmt.Errorf("%w: creator_pid %d: the process that sent the request has exited", api.ErrBadRequest, c.PID)
	}
	if err != nil {
		return api.Session{}, false, fmt.Errorf("creator_pid %d: %w", c.PID, err)
	}
	c.Start = proc.Start
	watched := false
	defer func() {
		if !watched {
			unix.Close(fd)
		}
	}()
	conflict := func() error {
		return fmt.Errorf("%w: session %q exists, and a session created for a process (gpuslice run) is that process's alone", api.ErrConflict, req.ID)
	}
	if s := m.lookup(req.ID); s != nil && !s.boundTo(c) {
		return api.Session{}, false, conflict()
	}
	v, created, err := m.Create(req)
	if err != nil {
		return api.Session{}, false, err
	}
	s := m.lookup(req.ID)
	if s == nil {
		return api.Session{}, false, fmt.Errorf("%w: session %q", api.ErrNotFound, req.ID)
	}
	if !created {
		if !s.boundTo(c) { // made meanwhile by another
			return api.Session{}, false, conflict()
		}
		return v, false, nil
	}
	s.mu.Lock()
	rec := s.rec
	rec.CreatorPID, rec.CreatorStart = c.PID, c.Start
	s.rec = rec // kept in memory whatever the write below does: the sweep writes it again
	if err := m.st.PutSession(rec); err != nil {
		s.unsaved++
		m.opt.Log.Warn("persist the creator of a session", "session", req.ID, "err", err)
	} else {
		s.unsaved = 0
	}
	s.mu.Unlock()
	watched = true
	k := reclaim.Key{Session: req.ID, Slot: creatorSlot, PID: c.PID, StartTime: c.Start}
	if err := m.watcher.AddPidfd(k, fd); err != nil {
		m.opt.Log.Warn("the creator of a session is not watched: the session is released by its run or its TTL", "session", req.ID, "pid", c.PID, "err", err)
	}
	m.opt.Log.Info("session bound to its creator", "session", req.ID, "pid", c.PID)
	return v, true, nil
}

func (m *Manager) lookup(id string) *Session {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.sessions[id]
}

// boundTo reports whether s is live and bound to c.
func (s *Session) boundTo(c Creator) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.released && s.rec.CreatorPID != 0 && s.rec.CreatorPID == c.PID && s.rec.CreatorStart == c.Start
}

// runCgroupDir is the cgroup `gpuslice run` makes for session id.
func runCgroupDir(id string) string {
	return filepath.Join(RunCgroupRoot, identity.V2Dir(RunCgroupRoot), identity.RunCgroupPrefix+id)
}

// creatorGone acts for a run whose process is gone (the watcher saw its
// creator exit, or a restart found it gone): when the session it named is
// still live and bound to that process, what is left in the run's cgroup
// is killed, the cgroup removed and the session released. A process
// attached from outside the cgroup holds the release until it exits, as
// a DELETE does.
func (m *Manager) creatorGone(k reclaim.Key) {
	s := m.lookup(k.Session)
	if s == nil || !s.boundTo(Creator{PID: k.PID, Start: k.StartTime}) {
		return // released by its run, or the id is another session's now
	}
	dir := runCgroupDir(k.Session)
	m.opt.Log.Warn("the process that created the session is gone without releasing it: stopping what is left in its cgroup and releasing it",
		"session", k.Session, "pid", k.PID, "cgroup", dir)
	if err := runcgroup.Remove(dir, creatorKillWait); err != nil {
		m.opt.Log.Warn("empty an abandoned run's cgroup", "session", k.Session, "err", err)
	}
	held := false
	_, err := m.releaseIf(k.Session, "abandoned", func(x *Session) bool {
		if x != s {
			return false
		}
		if m.reclaimDeadLocked(x) == 0 {
			return true
		}
		x.deleting, held = true, true
		return false
	})
	switch {
	case held:
		m.opt.Log.Warn("an abandoned session still has live processes outside its cgroup: released when they exit", "session", k.Session)
	case err != nil && !errors.Is(err, api.ErrNotFound) && !errors.Is(err, errStillInUse):
		m.opt.Log.Warn("release an abandoned session", "session", k.Session, "err", err)
	}
}

// watchCreators watches the creators of the restored sessions again; one
// gone while gpusliced was not running is acted on at once (creatorGone).
func (m *Manager) watchCreators() {
	var keys []reclaim.Key
	m.mu.RLock()
	for id, s := range m.sessions {
		s.mu.Lock()
		if s.rec.CreatorPID != 0 {
			keys = append(keys, reclaim.Key{Session: id, Slot: creatorSlot, PID: s.rec.CreatorPID, StartTime: s.rec.CreatorStart})
		}
		s.mu.Unlock()
	}
	m.mu.RUnlock()
	for _, k := range keys {
		err := m.watcher.Add(k)
		switch {
		case errors.Is(err, reclaim.ErrGone):
			go m.creatorGone(k)
		case err != nil:
			m.opt.Log.Warn("the creator of a session is not watched: the session is released by its run or its TTL", "session", k.Session, "pid", k.PID, "err", err)
		}
	}
}
