package session

// What the database could not take. A session is created when its job
// starts, and released when it ends, whatever the state directory's
// filesystem says: a full filesystem fails no Prolog (Slurm would drain
// the node) and keeps no session past its job. A record the database
// refused is kept in memory (Session.unsaved) and Sweep writes it once
// there is room. A release's report (the Epilog records it in Slurm's
// accounting) is returned at once; when the database refuses it, it
// waits here and Sweep writes it, with the removal of the session's
// record, once there is room; Close tries once more. Not handled: a
// gpusliced killed (-9) while a report waits finds the session's record
// at its next start and restores it, and the session lives to its TTL
// (its Epilog has run); one killed while a created session's record
// waits does not find that session: its processes keep the quota their
// ledger holds, but the GPU's memory is no longer counted for it (logged
// at the start: "a live process maps a ledger of a session the database
// does not list").

import (
	"github.com/gpuslice/gpuslice/internal/api"
)

// keepUnwrittenLocked keeps session id's report for a later write; m.mu
// held.
func (m *Manager) keepUnwrittenLocked(id string, rep api.Report, err error) {
	if m.unwritten == nil {
		m.unwritten = map[string]api.Report{}
	}
	m.unwritten[id] = rep
	m.opt.Log.Warn("persist release: released all the same; written when the state directory has room",
		"session", id, "err", err)
}

// unwrittenReport is session id's report while it waits to be written.
func (m *Manager) unwrittenReport(id string) (api.Report, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	rep, ok := m.unwritten[id]
	return rep, ok
}

// writeUnwritten writes the reports that wait, the oldest first, until
// one fails.
func (m *Manager) writeUnwritten() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.unwritten) > 0 {
		id, rep := "", api.Report{}
		for k, r := range m.unwritten {
			if id == "" || r.Released.Before(rep.Released) {
				id, rep = k, r
			}
		}
		if err := m.st.Release(id, rep); err != nil {
			return
		}
		delete(m.unwritten, id)
		m.opt.Log.Info("persist release: written", "session", id)
	}
}
