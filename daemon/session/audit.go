package session

import (
	"sync"

	"github.com/gpuslice/gpuslice/daemon/audit"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
)

// AuditJobs is the audit's pid -> session source: the processes attached
// to a session (slot pid and start time, written only by the daemon), else
// the Slurm job the kernel places the pid in (Options.Identity) when that
// job has a session. Quotas refreshes the attached set once per pass.
type AuditJobs struct {
	m *Manager

	mu       sync.Mutex
	attached map[uint32]string
	cache    map[uint32]jobEntry // identity answers by pid, checked by start time
}

type jobEntry struct {
	start uint64
	job   string
}

// AuditJobs returns the manager's audit.Jobs.
func (m *Manager) AuditJobs() *AuditJobs {
	return &AuditJobs{m: m, attached: map[uint32]string{}, cache: map[uint32]jobEntry{}}
}

// Quotas snapshots every live session's limits by inventory GPU and the
// attached pids.
func (j *AuditJobs) Quotas() audit.Quotas {
	m := j.m
	q := audit.Quotas{}
	att := map[uint32]string{}
	m.mu.RLock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.RUnlock()
	for _, s := range ss {
		s.mu.Lock()
		if s.released {
			s.mu.Unlock()
			continue
		}
		lim := map[int]uint64{}
		for g, uuid := range s.rec.GPUs {
			if i := s.gidx[g]; i >= 0 {
				lim[i] = s.rec.Limits[uuid]
			}
		}
		q[s.rec.ID] = lim
		for _, i := range s.led.InUse() {
			if st, pid := s.led.SlotState(i); st != 0 {
				att[pid] = s.rec.ID
			}
		}
		s.mu.Unlock()
	}
	j.mu.Lock()
	j.attached = att
	j.mu.Unlock()
	return q
}

// SessionOf returns the session pid belongs to.
func (j *AuditJobs) SessionOf(pid uint32) string {
	j.mu.Lock()
	id, ok := j.attached[pid]
	j.mu.Unlock()
	if ok {
		return id
	}
	if j.m.opt.Identity == nil {
		return ""
	}
	start, err := reclaim.StartTime(pid)
	if err != nil {
		return ""
	}
	j.mu.Lock()
	e, ok := j.cache[pid]
	j.mu.Unlock()
	if !ok || e.start != start {
		job, _ := j.m.opt.Identity(pid, 0)
		e = jobEntry{start: start, job: job}
		j.mu.Lock()
		if len(j.cache) > 65536 {
			j.cache = map[uint32]jobEntry{}
		}
		j.cache[pid] = e
		j.mu.Unlock()
	}
	if e.job == "" {
		return ""
	}
	j.m.mu.RLock()
	_, live := j.m.sessions[e.job]
	j.m.mu.RUnlock()
	if !live {
		return ""
	}
	return e.job
}

// ObserveAudit keeps each session's audited peak per GPU: a figure from the
// driver, which the job cannot write. At the same pass the daemon reads
// the ledger of every session with a process attached (seeLocked): the
// driver may give no per-process figures (NVML's "not available") or
// miss memory its sample did not catch. It also keeps sums, what this
// pass found each session holding (Unused): a session the pass did not
// see holds nothing by the driver's figure. The audit loop makes a new
// map at each pass and writes it no more.
func (m *Manager) ObserveAudit(sums map[string]map[int]uint64) {
	m.audited.Store(&sums)
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, s := range m.sessions {
		if s.led.NInUse() == 0 {
			continue // nothing attached: nothing held but what was seen before
		}
		s.mu.Lock()
		if !s.released {
			s.seeLocked()
		}
		s.mu.Unlock()
	}
	for id, byGPU := range sums {
		s, ok := m.sessions[id]
		if !ok {
			continue
		}
		s.mu.Lock()
		for g, i := range s.gidx {
			if v := byGPU[i]; i >= 0 && v > s.auditPeak[g] {
				s.auditPeak[g] = v
			}
		}
		s.mu.Unlock()
	}
}

// NoteOverrun records an audited overrun in the session's report.
func (m *Manager) NoteOverrun(o audit.Overrun, stopped []uint32, killPolicy bool) {
	m.mu.RLock()
	s, ok := m.sessions[o.Session]
	m.mu.RUnlock()
	if !ok {
		return
	}
	uuid := ""
	if o.GPU >= 0 && o.GPU < len(m.gpus) {
		uuid = m.gpus[o.GPU].UUID
	}
	note := audit.Describe(o, uuid, stopped, killPolicy, m.opt.Now())
	s.mu.Lock()
	if len(s.auditNotes) < maxAuditNotes {
		s.auditNotes = append(s.auditNotes, note)
	}
	s.auditKilled += len(stopped)
	s.mu.Unlock()
}

// maxAuditNotes bounds the overrun lines kept per session.
const maxAuditNotes = 32
