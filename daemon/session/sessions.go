package session

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/size"
)

// Create admits and creates a session. created is false when the same
// session already existed (idempotent create).
func (m *Manager) Create(req api.SessionRequest) (api.Session, bool, error) {
	limits, err := m.limitsFromRequest(req)
	if err != nil {
		return api.Session{}, false, err
	}
	req.Compute = m.computeFor(req, limits) // the site's policy (computepolicy.go)
	if err := req.Compute.Validate(); err != nil {
		return api.Session{}, false, err
	}
	sluid := ""
	if req.SLUID != "" {
		var ok bool
		if sluid, ok = api.CanonicalSLUID(req.SLUID); !ok {
			return api.Session{}, false, fmt.Errorf("%w: sluid %q: expected s and 13 Crockford base32 characters", api.ErrBadRequest, req.SLUID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waitProbesLocked(limits) // before anything is looked at: it may let go of m.mu
	if s, ok := m.sessions[req.ID]; ok {
		s.mu.Lock() // Patch replaces s.rec under s.mu
		same := s.uid == req.UID && sameLimits(s.rec.Limits, limits) && s.rec.SLUID == sluid
		s.mu.Unlock()
		if same {
			v, _ := m.view(s) // cannot be released: we hold m.mu
			return v, false, nil
		}
		// Another SLUID is another run of the job id (requeue).
		return api.Session{}, false, fmt.Errorf("%w: session %q exists with another owner, quotas or SLUID (uid %d)", api.ErrConflict, req.ID, s.uid)
	}
	if other, ok := m.bySLUID[sluid]; sluid != "" && ok {
		return api.Session{}, false, fmt.Errorf("%w: sluid %s is session %q's", api.ErrConflict, sluid, other)
	}
	if err := m.admit(limits, ""); err != nil {
		return api.Session{}, false, err
	}
	now := m.opt.Now().UTC()
	ttl := m.opt.DefaultTTL
	if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	rec := store.Record{ID: req.ID, UID: req.UID, Created: now, Updated: now, TTL: ttl,
		Expires: now.Add(ttl), GPUs: m.orderedUUIDs(limits), Limits: limits, Compute: req.Compute, SLUID: sluid}
	lg, idx := m.ledgerGPUs(rec)
	led, err := ledger.Create(m.opt.LedgerDir, rec.ID, lg, m.opt.Slots)
	if err != nil {
		return api.Session{}, false, fmt.Errorf("create ledger: %w", err)
	}
	m.leaveContextCostLocked(led, idx)
	var unsaved uint64
	if err := m.st.PutSession(rec); err != nil {
		// The job starts all the same (a full filesystem is no reason
		// to fail its Prolog and drain the node): the sweep writes the
		// record once there is room (unwritten.go).
		unsaved = 1
		m.opt.Log.Warn("persist session: created all the same; written when the state directory has room", "session", rec.ID, "err", err)
	}
	delete(m.unwritten, rec.ID) // an older session of the id: its record is this one's now
	led.FreezeIfIdle()          // no page of an idle session stays in the daemon
	s := &Session{rec: rec, uid: rec.UID, led: led, gidx: idx, images: map[int]uint64{}, auditPeak: make([]uint64, len(idx)), seenPeak: make([]uint64, len(idx)), fig: newFigures(len(idx)), unsaved: unsaved}
	m.sessions[rec.ID] = s
	if sluid != "" {
		m.bySLUID[sluid] = rec.ID
	}
	m.commitLocked(limits, +1)
	m.applyDriverLimits(rec, idx)
	if m.opt.ComputeAssign != nil {
		// Every session, with a share or not: its gates find their slot
		// when their processes attach, and a share given later reaches them.
		m.opt.ComputeAssign(rec.ID)
	}
	if m.opt.ComputeChanged != nil && rec.Compute.Shared() {
		m.opt.ComputeChanged()
	}
	if m.ev.Created != nil {
		m.ev.Created()
	}
	m.opt.Log.Info("session created", "session", rec.ID, "uid", rec.UID, "limits", fmtLimits(limits), "ttl", ttl, "sluid", sluid)
	v, _ := m.view(s)
	return v, true, nil
}

func fmtLimits(l map[string]uint64) string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+size.Format(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Get returns a live session.
func (m *Manager) Get(id string) (api.Session, error) {
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if ok {
		if v, live := m.view(s); live {
			return v, nil
		}
	}
	return api.Session{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
}

// List returns every live session, sorted by id.
func (m *Manager) List() []api.Session {
	var out []api.Session
	m.Each(func(v api.Session) { out = append(out, v) })
	if out == nil {
		out = []api.Session{}
	}
	return out
}

// Each calls fn with every live session, sorted by id, one view at a time
// (the admin API streams a list of 10,000 sessions without holding them
// all).
func (m *Manager) Each(fn func(api.Session)) {
	type entry struct {
		id string
		s  *Session
	}
	m.mu.RLock()
	ss := make([]entry, 0, len(m.sessions))
	for id, s := range m.sessions {
		ss = append(ss, entry{id, s})
	}
	m.mu.RUnlock()
	// Sorted by the ids copied out of the map: a comparison reads the two
	// strings, not two sessions first.
	slices.SortFunc(ss, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	for _, e := range ss {
		if v, live := m.view(e.s); live {
			fn(v)
		}
	}
}

// view renders a session object from the record and the live ledger; false
// when the session was released meanwhile (its ledger is unmapped).
func (m *Manager) view(s *Session) (api.Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return api.Session{}, false
	}
	return m.viewLocked(s), true
}

func (m *Manager) viewLocked(s *Session) api.Session {
	v := api.Session{ID: s.rec.ID, UID: s.rec.UID, Created: s.rec.Created, Updated: s.rec.Updated,
		TTLSeconds: int64(s.rec.TTL / time.Second), Expires: s.rec.Expires, SLUID: s.rec.SLUID, Compute: s.rec.Compute,
		GPUs: make([]api.SessionGPU, 0, len(s.rec.GPUs)), Processes: []api.Process{}}
	now := m.opt.Now()
	for g, uuid := range s.rec.GPUs {
		sg := api.SessionGPU{UUID: uuid, Index: s.gidx[g], LimitBytes: s.led.Limit(g),
			PhysicalBytes: s.led.Physical(g), UsedBytes: s.usedOf(g),
			PeakBytes: s.peakOf(g), Denied: s.deniedOf(g, now)}
		if i := s.gidx[g]; i >= 0 {
			sg.Name = m.gpus[i].Name
			sg.Enforcement = m.gpus[i].Enforcement()
		}
		v.GPUs = append(v.GPUs, sg)
	}
	for _, sl := range s.led.Attached() {
		p := api.Process{PID: sl.PID, Slot: sl.Index, Attached: time.Unix(0, int64(sl.AttachNS)).UTC(),
			UsedBytes: map[string]uint64{}}
		for g, b := range sl.Used {
			p.UsedBytes[s.rec.GPUs[g]] = b
		}
		v.Processes = append(v.Processes, p)
	}
	return v
}

// Patch changes quotas and/or TTL; the ledger limits change at once.
func (m *Manager) Patch(id string, req api.PatchRequest) (api.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return api.Session{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if req.QuotaBytes == nil && req.Quotas == nil && req.TTLSeconds == nil && req.Compute == nil {
		return api.Session{}, fmt.Errorf("%w: nothing to change (quota_bytes, quotas, ttl_seconds, compute)", api.ErrBadRequest)
	}
	if err := req.Compute.Validate(); err != nil {
		return api.Session{}, err
	}
	limits := map[string]uint64{}
	for k, v := range s.rec.Limits {
		limits[k] = v
	}
	if req.QuotaBytes != nil {
		for k := range limits {
			limits[k] = *req.QuotaBytes
		}
	}
	for ref, q := range req.Quotas {
		i, err := m.resolveGPU(ref)
		if err != nil {
			return api.Session{}, err
		}
		uuid := m.gpus[i].UUID
		if _, ok := limits[uuid]; !ok {
			return api.Session{}, fmt.Errorf("%w: GPU %s is not part of session %q", api.ErrBadRequest, uuid, id)
		}
		limits[uuid] = q
	}
	if req.TTLSeconds != nil && (*req.TTLSeconds < 0 || *req.TTLSeconds > MaxTTLSeconds) {
		return api.Session{}, fmt.Errorf("%w: ttl_seconds must be 0..%d (10 years)", api.ErrBadRequest, MaxTTLSeconds)
	}
	if err := m.admit(limits, id); err != nil {
		return api.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.opt.Now().UTC()
	rec := s.rec
	rec.Limits = limits
	rec.Updated = now
	if req.TTLSeconds != nil {
		rec.TTL = m.opt.DefaultTTL
		if *req.TTLSeconds > 0 {
			rec.TTL = time.Duration(*req.TTLSeconds) * time.Second
		}
		rec.Expires = now.Add(rec.TTL)
	}
	if req.Compute != nil {
		c := *req.Compute
		rec.Compute = &c
		if !c.Shared() {
			rec.Compute = nil // no share: as a session created without one
		}
	}
	if err := m.st.PutSession(rec); err != nil {
		return api.Session{}, fmt.Errorf("persist session: %w", err)
	}
	m.commitLocked(s.rec.Limits, -1)
	m.commitLocked(rec.Limits, +1)
	s.rec = rec
	if err := s.led.SetLimits(m.limitSlice(rec)); err != nil {
		return api.Session{}, fmt.Errorf("update ledger: %w", err)
	}
	m.applyDriverLimits(rec, s.gidx)
	// A share given, changed or removed holds from the compute controller's
	// next pass, which reads every session's (woken now: it waits longer
	// while no session has a share): the session has had its slot on the
	// compute page since it was created, and its running processes' launch
	// gates read it.
	if req.Compute != nil && m.opt.ComputeChanged != nil {
		m.opt.ComputeChanged()
	}
	m.opt.Log.Info("session changed", "session", id, "limits", fmtLimits(limits), "expires", rec.Expires, "compute", rec.Compute.String())
	return m.viewLocked(s), nil
}

func (m *Manager) limitSlice(rec store.Record) []uint64 {
	out := make([]uint64, len(rec.GPUs))
	for g, uuid := range rec.GPUs {
		out[g] = rec.Limits[uuid]
	}
	return out
}

// Delete releases a session and returns its report. A session with a
// live process is not released: its memory is still allocated, and
// releasing would leave it uncounted while the GPU is promised to the
// next job. The error (api.ErrConflict) names the processes; the session
// refuses new attaches from then on and is released ("deleted") as soon
// as its last process has exited.
func (m *Manager) Delete(id string) (api.Report, error) {
	var live []uint32
	rep, err := m.releaseIf(id, "deleted", func(s *Session) bool {
		if m.reclaimDeadLocked(s) == 0 {
			return true
		}
		s.deleting = true
		for _, i := range s.led.InUse() {
			_, pid := s.led.SlotState(i)
			live = append(live, pid)
		}
		return false
	})
	if errors.Is(err, errStillInUse) {
		m.opt.Log.Warn("delete of a session with live processes: released when they exit", "session", id, "pids", live)
		return api.Report{}, fmt.Errorf("%w: session %q has %d live process(es) (pids %v) holding GPU memory; it is released when they exit",
			api.ErrConflict, id, len(live), live)
	}
	return rep, err
}

// releaseDeleting releases session id once a delete is pending and no
// process is left.
func (m *Manager) releaseDeleting(id string) {
	_, err := m.releaseIf(id, "deleted", func(s *Session) bool {
		return s.deleting && m.reclaimDeadLocked(s) == 0
	})
	if err != nil && !errors.Is(err, api.ErrNotFound) && !errors.Is(err, errStillInUse) {
		m.opt.Log.Warn("release deleted session", "session", id, "err", err)
	}
}

func (m *Manager) release(id, reason string) (api.Report, error) {
	return m.releaseIf(id, reason, nil)
}

var errStillInUse = errors.New("session in use again")

// releaseIf releases session id; when cond is set, only if cond (called
// with the session locked) still holds.
func (m *Manager) releaseIf(id, reason string, cond func(*Session) bool) (api.Report, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok {
		m.mu.Unlock()
		return api.Report{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cond != nil && !cond(s) {
		m.mu.Unlock()
		return api.Report{}, errStillInUse
	}
	// A process killed just before the Epilog may not have been reclaimed
	// yet (its pidfd event still queued): count its bytes as reclaimed, not
	// as final usage.
	m.reclaimDeadLocked(s)
	s.seeLocked()
	rep := api.Report{ID: id, UID: s.rec.UID, Created: s.rec.Created, Released: m.opt.Now().UTC(), Reason: reason,
		Audit: s.auditNotes, AuditKilled: s.auditKilled}
	for g, uuid := range s.rec.GPUs {
		rep.GPUs = append(rep.GPUs, api.ReportGPU{UUID: uuid, LimitBytes: s.led.Limit(g),
			PeakBytes: s.peakOf(g), FinalUsedBytes: s.usedOf(g),
			Denied: s.deniedOf(g, m.opt.Now()), ReclaimedBytes: s.reclaimedOf(g), AuditPeakBytes: s.auditPeak[g]})
	}
	if err := m.st.Release(id, rep); err != nil {
		// The job has ended all the same: its memory is given back and
		// its report returned now; the database gets them when it has
		// room (unwritten.go).
		m.keepUnwrittenLocked(id, rep, err)
	}
	delete(m.sessions, id)
	if s.rec.SLUID != "" && m.bySLUID[s.rec.SLUID] == id {
		delete(m.bySLUID, s.rec.SLUID)
	}
	m.commitLocked(s.rec.Limits, -1)
	s.released = true
	m.mu.Unlock()

	m.releasedMu.Lock()
	for g, i := range s.gidx {
		if i >= 0 {
			m.releasedDenied[i] += s.deniedOf(g, m.opt.Now())
		}
	}
	m.releasedMu.Unlock()
	for _, sl := range s.led.Attached() {
		m.watcher.Remove(reclaim.Key{Session: id, Slot: sl.Index, PID: sl.PID, StartTime: sl.StartTime})
	}
	if err := s.led.Remove(); err != nil {
		m.opt.Log.Warn("remove ledger", "session", id, "err", err)
	}
	m.removeDriverLimits(s.rec, s.gidx)
	if m.ev.Released != nil {
		m.ev.Released(reason)
	}
	m.opt.Log.Info("session released", "session", id, "reason", reason)
	return rep, nil
}

// History returns the report of a released session.
func (m *Manager) History(id string) (api.Report, error) {
	if !api.ValidSessionID(id) {
		return api.Report{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if rep, ok := m.unwrittenReport(id); ok {
		return rep, nil
	}
	return m.st.History(id)
}
