// Package session holds gpusliced's sessions: admission, ledgers,
// attach/detach of processes, reclaim of dead ones, TTL reaping and
// re-adoption after a restart.
package session

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/size"
	"golang.org/x/sys/unix"
)

// Errors of the IPC path (the admin path uses the api sentinels).
var (
	ErrNotPermitted = errors.New("not permitted")
	ErrNoSlot       = ledger.ErrNoSlot
)

// Options configure a Manager.
type Options struct {
	LedgerDir        string
	Slots            int
	Overcommit       float64
	DefaultTTL       time.Duration
	HistoryRetention time.Duration
	Log              *slog.Logger
	Now              func() time.Time
}

// Events receives counts for metrics. Nil fields are skipped.
type Events struct {
	Reclaimed       func(gpuIndex int, bytes uint64)
	ProcessReclaim  func()
	AdmissionRefuse func()
	Released        func(reason string)
	Created         func()
}

// Manager owns every session. Methods are safe for concurrent use.
type Manager struct {
	opt     Options
	gpus    []gpu.GPU
	byUUID  map[string]int
	st      *store.Store
	watcher *reclaim.Watcher
	ev      Events

	mu       sync.RWMutex
	sessions map[string]*Session

	// denials of released sessions per GPU (keeps the counter monotonic).
	releasedMu     sync.Mutex
	releasedDenied []uint64

	lastPrune time.Time // touched by Sweep only (one goroutine)
}

// Session is one live session.
type Session struct {
	mu       sync.Mutex // serialises slot changes and limit changes
	released bool       // set under mu when the session is released
	rec      store.Record
	uid      uint32 // owner, = rec.UID; never changes, read without mu
	led      *ledger.Ledger
	gidx     []int // ledger GPU g -> inventory index
}

// New creates a Manager. Call Restore, then start the watcher's Run.
func New(opt Options, gpus []gpu.GPU, st *store.Store, ev Events) (*Manager, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Slots <= 0 {
		opt.Slots = ledger.DefaultSlots
	}
	if len(gpus) > ledger.MaxGPUs {
		return nil, fmt.Errorf("%d GPUs on this node; the ledger holds at most %d", len(gpus), ledger.MaxGPUs)
	}
	m := &Manager{opt: opt, gpus: gpus, byUUID: map[string]int{}, st: st, ev: ev,
		sessions: map[string]*Session{}, releasedDenied: make([]uint64, len(gpus))}
	for i, g := range gpus {
		m.byUUID[g.UUID] = i
	}
	w, err := reclaim.NewWatcher(m.onExit)
	if err != nil {
		return nil, err
	}
	m.watcher = w
	return m, nil
}

// Watcher returns the process watcher (the caller runs and closes it).
func (m *Manager) Watcher() *reclaim.Watcher { return m.watcher }

// GPUs is the inventory.
func (m *Manager) GPUs() []gpu.GPU { return m.gpus }

// Close unmaps every ledger (files stay for the next start).
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		s.mu.Lock()
		s.led.Close()
		s.mu.Unlock()
	}
	m.sessions = map[string]*Session{}
}

// resolveGPU maps a UUID or an NVML index string to an inventory index.
func (m *Manager) resolveGPU(ref string) (int, error) {
	if i, ok := m.byUUID[ref]; ok {
		return i, nil
	}
	if n, err := strconv.Atoi(ref); err == nil && n >= 0 && n < len(m.gpus) {
		return n, nil
	}
	return -1, fmt.Errorf("%w: unknown GPU %q (use a UUID or an index 0..%d)", api.ErrBadRequest, ref, len(m.gpus)-1)
}

// limitsFromRequest resolves a create request into UUID -> limit.
// MaxTTLSeconds bounds ttl_seconds (10 years), far below the point where a
// time.Duration overflows.
const MaxTTLSeconds = 10 * 365 * 24 * 3600

func (m *Manager) limitsFromRequest(req api.SessionRequest) (map[string]uint64, error) {
	if !api.ValidSessionID(req.ID) {
		return nil, fmt.Errorf("%w: session id %q: use 1..63 characters from A-Z a-z 0-9 . _ -", api.ErrBadRequest, req.ID)
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > MaxTTLSeconds {
		return nil, fmt.Errorf("%w: ttl_seconds must be 0..%d (10 years)", api.ErrBadRequest, MaxTTLSeconds)
	}
	if len(m.gpus) == 0 {
		return nil, fmt.Errorf("%w: this node has no GPU", api.ErrBadRequest)
	}
	limits := map[string]uint64{}
	if len(req.GPUs) == 0 && len(req.Quotas) == 0 {
		for _, g := range m.gpus {
			limits[g.UUID] = req.QuotaBytes
		}
	}
	for _, ref := range req.GPUs {
		i, err := m.resolveGPU(ref)
		if err != nil {
			return nil, err
		}
		limits[m.gpus[i].UUID] = req.QuotaBytes
	}
	for ref, q := range req.Quotas {
		i, err := m.resolveGPU(ref)
		if err != nil {
			return nil, err
		}
		limits[m.gpus[i].UUID] = q
	}
	var total uint64
	for _, v := range limits {
		total += v
	}
	if total == 0 {
		return nil, fmt.Errorf("%w: no quota given (quota_bytes or quotas)", api.ErrBadRequest)
	}
	return limits, nil
}

// admit checks that want (UUID -> limit) fits on every GPU alongside the
// other sessions (excluding except). Caller holds m.mu.
func (m *Manager) admit(want map[string]uint64, except string) error {
	committed, count := m.committedLocked(except)
	var msgs []string
	for uuid, v := range want {
		i, ok := m.byUUID[uuid]
		if !ok {
			continue
		}
		g := m.gpus[i]
		capacity := uint64(math.Min(float64(g.Physical)*m.opt.Overcommit, math.MaxUint64/2))
		var free uint64
		if committed[i] < capacity {
			free = capacity - committed[i]
		}
		if v > free {
			msgs = append(msgs, fmt.Sprintf("GPU %d (%s): asked %s, %s free (%s capacity x overcommit %g, %s committed to %d other sessions)",
				i, uuid, size.Format(v), size.Format(free), size.Format(g.Physical), m.opt.Overcommit,
				size.Format(committed[i]), count[i]))
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		if m.ev.AdmissionRefuse != nil {
			m.ev.AdmissionRefuse()
		}
		return fmt.Errorf("%w: %s", api.ErrQuotaExceeded, strings.Join(msgs, "; "))
	}
	return nil
}

func (m *Manager) committedLocked(except string) ([]uint64, []int) {
	committed := make([]uint64, len(m.gpus))
	count := make([]int, len(m.gpus))
	for id, s := range m.sessions {
		if id == except {
			continue
		}
		for uuid, v := range s.rec.Limits {
			if i, ok := m.byUUID[uuid]; ok {
				committed[i] += v
				count[i]++
			}
		}
	}
	return committed, count
}

func sameLimits(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ledgerGPUs lists rec's GPUs in inventory order with their limits.
func (m *Manager) ledgerGPUs(rec store.Record) ([]ledger.GPU, []int) {
	var lg []ledger.GPU
	var idx []int
	for _, uuid := range rec.GPUs {
		i, ok := m.byUUID[uuid]
		phys := uint64(0)
		if ok {
			phys = m.gpus[i].Physical
		} else {
			i = -1
		}
		lg = append(lg, ledger.GPU{UUID: uuid, Limit: rec.Limits[uuid], Physical: phys})
		idx = append(idx, i)
	}
	return lg, idx
}

func (m *Manager) orderedUUIDs(limits map[string]uint64) []string {
	var out []string
	for _, g := range m.gpus {
		if _, ok := limits[g.UUID]; ok {
			out = append(out, g.UUID)
		}
	}
	return out
}

// Create admits and creates a session. created is false when the same
// session already existed (idempotent create).
func (m *Manager) Create(req api.SessionRequest) (api.Session, bool, error) {
	limits, err := m.limitsFromRequest(req)
	if err != nil {
		return api.Session{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[req.ID]; ok {
		s.mu.Lock() // Patch replaces s.rec under s.mu
		same := s.uid == req.UID && sameLimits(s.rec.Limits, limits)
		s.mu.Unlock()
		if same {
			v, _ := m.view(s) // cannot be released: we hold m.mu
			return v, false, nil
		}
		return api.Session{}, false, fmt.Errorf("%w: session %q exists with another owner or quotas (uid %d)", api.ErrConflict, req.ID, s.uid)
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
		Expires: now.Add(ttl), GPUs: m.orderedUUIDs(limits), Limits: limits}
	lg, idx := m.ledgerGPUs(rec)
	led, err := ledger.Create(m.opt.LedgerDir, rec.ID, lg, m.opt.Slots)
	if err != nil {
		return api.Session{}, false, fmt.Errorf("create ledger: %w", err)
	}
	if err := m.st.PutSession(rec); err != nil {
		led.Remove()
		return api.Session{}, false, fmt.Errorf("persist session: %w", err)
	}
	s := &Session{rec: rec, uid: rec.UID, led: led, gidx: idx}
	m.sessions[rec.ID] = s
	if m.ev.Created != nil {
		m.ev.Created()
	}
	m.opt.Log.Info("session created", "session", rec.ID, "uid", rec.UID, "limits", fmtLimits(limits), "ttl", ttl)
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
	m.mu.RLock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.RUnlock()
	out := make([]api.Session, 0, len(ss))
	for _, s := range ss {
		if v, live := m.view(s); live {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
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
		TTLSeconds: int64(s.rec.TTL / time.Second), Expires: s.rec.Expires,
		GPUs: []api.SessionGPU{}, Processes: []api.Process{}}
	for g, uuid := range s.rec.GPUs {
		sg := api.SessionGPU{UUID: uuid, Index: s.gidx[g], LimitBytes: s.led.Limit(g),
			PhysicalBytes: s.led.Physical(g), UsedBytes: s.led.Used(g),
			PeakBytes: max(s.led.Peak(g), s.rec.Peak[uuid]), Denied: s.led.Denied(g)}
		if i := s.gidx[g]; i >= 0 {
			sg.Name = m.gpus[i].Name
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
	if req.QuotaBytes == nil && req.Quotas == nil && req.TTLSeconds == nil {
		return api.Session{}, fmt.Errorf("%w: nothing to change (quota_bytes, quotas, ttl_seconds)", api.ErrBadRequest)
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
	if err := m.st.PutSession(rec); err != nil {
		return api.Session{}, fmt.Errorf("persist session: %w", err)
	}
	s.rec = rec
	if err := s.led.SetLimits(m.limitSlice(rec)); err != nil {
		return api.Session{}, fmt.Errorf("update ledger: %w", err)
	}
	m.opt.Log.Info("session changed", "session", id, "limits", fmtLimits(limits), "expires", rec.Expires)
	return m.viewLocked(s), nil
}

func (m *Manager) limitSlice(rec store.Record) []uint64 {
	out := make([]uint64, len(rec.GPUs))
	for g, uuid := range rec.GPUs {
		out[g] = rec.Limits[uuid]
	}
	return out
}

// Delete releases a session and returns its report.
func (m *Manager) Delete(id string) (api.Report, error) {
	return m.release(id, "deleted")
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
	rep := api.Report{ID: id, UID: s.rec.UID, Created: s.rec.Created, Released: m.opt.Now().UTC(), Reason: reason}
	for g, uuid := range s.rec.GPUs {
		rep.GPUs = append(rep.GPUs, api.ReportGPU{UUID: uuid, LimitBytes: s.led.Limit(g),
			PeakBytes: max(s.led.Peak(g), s.rec.Peak[uuid]), FinalUsedBytes: s.led.Used(g),
			Denied: s.led.Denied(g), ReclaimedBytes: s.led.Reclaimed(g)})
	}
	if err := m.st.Release(id, rep); err != nil {
		m.mu.Unlock()
		return api.Report{}, fmt.Errorf("persist release: %w", err)
	}
	delete(m.sessions, id)
	s.released = true
	m.mu.Unlock()

	m.releasedMu.Lock()
	for g, i := range s.gidx {
		if i >= 0 {
			m.releasedDenied[i] += s.led.Denied(g)
		}
	}
	m.releasedMu.Unlock()
	for _, sl := range s.led.Attached() {
		m.watcher.Remove(reclaim.Key{Session: id, Slot: sl.Index, PID: sl.PID, StartTime: sl.StartTime})
	}
	if err := s.led.Remove(); err != nil {
		m.opt.Log.Warn("remove ledger", "session", id, "err", err)
	}
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
	return m.st.History(id)
}

// Inventory returns the node's GPUs with committed and used bytes.
func (m *Manager) Inventory() []api.GPU {
	m.mu.RLock()
	defer m.mu.RUnlock()
	committed, count := m.committedLocked("")
	used := m.usedLocked()
	out := make([]api.GPU, len(m.gpus))
	for i, g := range m.gpus {
		out[i] = api.GPU{Index: i, UUID: g.UUID, Name: g.Name, PhysicalBytes: g.Physical,
			CommittedBytes: committed[i], UsedBytes: used[i], Sessions: count[i]}
	}
	return out
}

func (m *Manager) usedLocked() []uint64 {
	used := make([]uint64, len(m.gpus))
	for _, s := range m.sessions {
		for g, i := range s.gidx {
			if i >= 0 {
				used[i] += s.led.Used(g)
			}
		}
	}
	return used
}

// Attachment is what an ATTACH returns; the caller closes it.
type Attachment struct {
	Slot       int
	NGPUs      int
	Generation uint64
	Limits     *os.File
	Counters   *os.File
}

// Attach registers pid (with the peer uid) in session id.
func (m *Manager) Attach(id string, uid, pid uint32) (Attachment, error) {
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if !ok {
		return Attachment{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	if uid != 0 && uid != s.uid {
		return Attachment{}, fmt.Errorf("%w: session %q belongs to uid %d, not %d", ErrNotPermitted, id, s.uid, uid)
	}
	start, err := reclaim.StartTime(pid)
	if err != nil {
		return Attachment{}, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return Attachment{}, fmt.Errorf("%w: session %q", api.ErrNotFound, id)
	}
	now := uint64(m.opt.Now().UnixNano())
	slot, again, err := s.led.Claim(pid, start, now)
	if err != nil {
		return Attachment{}, err
	}
	if again {
		// The same process attaching a second time is a new program image:
		// the interceptor attaches once per image (a failed attach leaves
		// nothing charged), so the old image was replaced by exec, and the
		// driver freed its memory then. Its charge is given back and the
		// new image starts from an empty slot.
		m.watcher.Remove(reclaim.Key{Session: id, Slot: slot, PID: pid, StartTime: start})
		m.reclaimSlotLocked(s, slot)
		if slot, _, err = s.led.Claim(pid, start, now); err != nil {
			return Attachment{}, err
		}
	}
	k := reclaim.Key{Session: id, Slot: slot, PID: pid, StartTime: start}
	if err := m.watcher.Add(k); err != nil {
		if errors.Is(err, reclaim.ErrGone) {
			m.reclaimSlotLocked(s, slot)
			return Attachment{}, fmt.Errorf("process %d exited during attach", pid)
		}
		m.opt.Log.Warn("pidfd watch failed; relying on the /proc sweep", "pid", pid, "err", err)
	}
	m.opt.Log.Debug("attached", "session", id, "pid", pid, "slot", slot, "new_image", again)
	// Duplicate the fds under the session lock: a concurrent release closes
	// the ledger's own files, and a closed fd number must never be sent.
	lim, ctr := s.led.Files()
	limFD, err := unix.FcntlInt(lim.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return Attachment{}, fmt.Errorf("dup ledger fd: %w", err)
	}
	ctrFD, err := unix.FcntlInt(ctr.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(limFD)
		return Attachment{}, fmt.Errorf("dup ledger fd: %w", err)
	}
	return Attachment{Slot: slot, NGPUs: s.led.NGPUs(), Generation: s.led.Generation(),
		Limits: os.NewFile(uintptr(limFD), "limits"), Counters: os.NewFile(uintptr(ctrFD), "counters")}, nil
}

// Close closes the attachment's fds (after they were sent).
func (a Attachment) Close() {
	a.Limits.Close()
	a.Counters.Close()
}

// Detach frees the slot of pid; hint is the session the connection
// attached to ("" to search every session).
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
		if slot >= 0 && slot < s.led.NSlots() {
			st, p := s.led.SlotState(slot)
			if st == ledger.SlotAttached && p == pid && !s.released {
				sl := s.led.Slot(slot)
				m.watcher.Remove(reclaim.Key{Session: s.rec.ID, Slot: slot, PID: pid, StartTime: sl.StartTime})
				m.reclaimSlotLocked(s, slot)
				s.mu.Unlock()
				m.opt.Log.Debug("detached", "session", s.rec.ID, "pid", pid, "slot", slot)
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
// process is left. Caller holds s.mu.
func (m *Manager) reclaimSlotLocked(s *Session, slot int) {
	got := s.led.Reclaim(slot)
	var total uint64
	for g, b := range got {
		total += b
		if b > 0 && m.ev.Reclaimed != nil && s.gidx[g] >= 0 {
			m.ev.Reclaimed(s.gidx[g], b)
		}
	}
	m.rebaseIfIdleLocked(s)
	if total > 0 {
		m.opt.Log.Info("reclaimed", "session", s.rec.ID, "slot", slot, "bytes", total)
	}
}

func (m *Manager) rebaseIfIdleLocked(s *Session) {
	if s.led.NInUse() == 0 {
		s.led.Rebase()
	}
}

// onExit is the watcher's callback: a watched process died.
func (m *Manager) onExit(k reclaim.Key) {
	m.mu.RLock()
	s, ok := m.sessions[k.Session]
	m.mu.RUnlock()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	sl := s.led.Slot(k.Slot)
	if sl.State != ledger.SlotAttached || sl.PID != k.PID || sl.StartTime != k.StartTime {
		return
	}
	if reclaim.Alive(k.PID, k.StartTime) {
		// Not an exit (a pidfd exits only once a process has): keep its
		// bytes; the sweep reclaims it when it really goes.
		return
	}
	m.reclaimSlotLocked(s, k.Slot)
	if m.ev.ProcessReclaim != nil {
		m.ev.ProcessReclaim()
	}
	m.opt.Log.Debug("process exited", "session", k.Session, "pid", k.PID, "slot", k.Slot)
}

// reclaimDeadLocked gives back what the session's dead processes held and
// returns how many of its processes are alive.
func (m *Manager) reclaimDeadLocked(s *Session) (attached int) {
	for _, i := range s.led.InUse() {
		st, pid := s.led.SlotState(i)
		sl := s.led.Slot(i)
		if st == ledger.SlotAttached && reclaim.Alive(pid, sl.StartTime) {
			attached++
			continue
		}
		m.watcher.Remove(reclaim.Key{Session: s.rec.ID, Slot: i, PID: pid, StartTime: sl.StartTime})
		m.reclaimSlotLocked(s, i)
		if m.ev.ProcessReclaim != nil {
			m.ev.ProcessReclaim()
		}
	}
	return attached
}

// Sweep is the periodic backstop: it reclaims slots whose process is gone,
// re-bases idle ledgers, reaps sessions past their TTL with no process, and
// prunes old history.
func (m *Manager) Sweep() {
	m.mu.RLock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.RUnlock()
	now := m.opt.Now()
	var expired []string
	var dirty []store.Record
	for _, s := range ss {
		s.mu.Lock()
		if s.released {
			s.mu.Unlock()
			continue
		}
		var changed bool
		if m.reclaimDeadLocked(s) == 0 {
			s.led.Rebase()
			if now.After(s.rec.Expires) {
				expired = append(expired, s.rec.ID)
			}
		} else if slack := min(s.rec.TTL/2, time.Hour); s.rec.Expires.Before(now.Add(s.rec.TTL - slack)) {
			// A session in use never expires: its TTL runs again from the
			// last sweep that saw one of its processes alive (a long job
			// idle between two steps keeps its quota). Moved in steps of
			// slack so the database is written at most once per slack.
			s.rec.Expires = now.Add(s.rec.TTL)
			changed = true
		}
		// Keep the peaks in the database too: they outlive a lost ledger.
		for g, uuid := range s.rec.GPUs {
			if p := s.led.Peak(g); p > s.rec.Peak[uuid] {
				if !changed {
					peaks := make(map[string]uint64, len(s.rec.GPUs))
					for k, v := range s.rec.Peak {
						peaks[k] = v
					}
					s.rec.Peak = peaks
					changed = true
				}
				s.rec.Peak[uuid] = p
			}
		}
		if changed {
			dirty = append(dirty, s.rec)
		}
		s.mu.Unlock()
	}
	if err := m.st.PutSessions(dirty); err != nil {
		m.opt.Log.Warn("persist peaks and expiry", "err", err)
	}
	for _, id := range expired {
		if _, err := m.releaseIf(id, "ttl", func(s *Session) bool {
			// Between the decision above and now a process may have
			// attached, or the id been released and created again.
			return m.reclaimDeadLocked(s) == 0 && m.opt.Now().After(s.rec.Expires)
		}); err != nil && !errors.Is(err, api.ErrNotFound) && !errors.Is(err, errStillInUse) {
			m.opt.Log.Warn("reap expired session", "session", id, "err", err)
		}
	}
	// Pruning reads every report: at most once an hour.
	if m.opt.HistoryRetention > 0 && (m.lastPrune.IsZero() || now.Sub(m.lastPrune) >= time.Hour) {
		m.lastPrune = now
		if n, err := m.st.PruneHistory(now.Add(-m.opt.HistoryRetention)); err != nil {
			m.opt.Log.Warn("prune history", "err", err)
		} else if n > 0 {
			m.opt.Log.Info("pruned history", "reports", n)
		}
	}
}

// Restore re-adopts the persisted sessions: ledgers are mapped again (or
// recreated with used=0 when missing or unreadable), limits re-applied from
// the database, live processes watched again and dead ones reclaimed.
// Ledger files without a session are removed.
func (m *Manager) Restore() error {
	recs, err := m.st.Sessions()
	if err != nil {
		return fmt.Errorf("load sessions: %w", err)
	}
	known := map[string]bool{}
	for _, rec := range recs {
		if !api.ValidSessionID(rec.ID) || len(rec.GPUs) == 0 {
			m.opt.Log.Warn("dropping invalid stored session", "session", rec.ID)
			m.st.DeleteSession(rec.ID)
			continue
		}
		known[rec.ID] = true
		lg, idx := m.ledgerGPUs(rec)
		led, err := ledger.Open(m.opt.LedgerDir, rec.ID)
		if err == nil && !sameGPUs(led, rec.GPUs) {
			led.Close()
			err = fmt.Errorf("%w: GPU list differs from the stored session", ledger.ErrInvalid)
		}
		if err != nil {
			m.opt.Log.Warn("recreating ledger", "session", rec.ID, "reason", err)
			led, err = ledger.Create(m.opt.LedgerDir, rec.ID, lg, m.opt.Slots)
			if err != nil {
				return fmt.Errorf("recreate ledger %s: %w", rec.ID, err)
			}
		}
		s := &Session{rec: rec, uid: rec.UID, led: led, gidx: idx}
		want := m.limitSlice(rec)
		for g, v := range want {
			if led.Limit(g) != v {
				if err := led.SetLimits(want); err != nil {
					return fmt.Errorf("ledger %s: %w", rec.ID, err)
				}
				break
			}
		}
		adopted := 0
		for _, sl := range led.Attached() {
			k := reclaim.Key{Session: rec.ID, Slot: sl.Index, PID: sl.PID, StartTime: sl.StartTime}
			if sl.State == ledger.SlotAttached {
				if err := m.watcher.Add(k); err == nil {
					adopted++
					continue
				} else if !errors.Is(err, reclaim.ErrGone) {
					m.opt.Log.Warn("pidfd watch failed; relying on the /proc sweep", "pid", sl.PID, "err", err)
					if reclaim.Alive(sl.PID, sl.StartTime) {
						adopted++
						continue
					}
				}
			}
			m.reclaimSlotLocked(s, sl.Index)
		}
		m.rebaseIfIdleLocked(s)
		m.mu.Lock()
		m.sessions[rec.ID] = s
		m.mu.Unlock()
		m.opt.Log.Info("session re-adopted", "session", rec.ID, "processes", adopted)
	}
	// Remove orphan ledger files (a crash between ledger and database writes).
	entries, err := os.ReadDir(m.opt.LedgerDir)
	if err != nil {
		return fmt.Errorf("read ledger dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		id := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".tmp"), ".limits"), ".counters")
		if !known[id] {
			os.Remove(filepath.Join(m.opt.LedgerDir, name))
		}
	}
	return nil
}

func sameGPUs(led *ledger.Ledger, uuids []string) bool {
	if led.NGPUs() != len(uuids) {
		return false
	}
	for g, u := range uuids {
		if led.UUID(g) != u {
			return false
		}
	}
	return true
}

// Stats is a snapshot for metrics.
type Stats struct {
	Sessions  int
	Attached  int
	Committed []uint64 // per inventory GPU
	Used      []uint64
	Count     []int
	Denied    []uint64 // monotonic: live + released
	PerSess   []SessionStats
}

// SessionStats is one session's figures (metrics_debug).
type SessionStats struct {
	ID    string
	UUIDs []string
	Limit []uint64
	Used  []uint64
	Peak  []uint64
}

// Snapshot collects Stats; perSession adds SessionStats.
func (m *Manager) Snapshot(perSession bool) Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := Stats{Sessions: len(m.sessions)}
	st.Committed, st.Count = m.committedLocked("")
	st.Used = m.usedLocked()
	m.releasedMu.Lock()
	st.Denied = append([]uint64(nil), m.releasedDenied...)
	m.releasedMu.Unlock()
	for _, s := range m.sessions {
		for g, i := range s.gidx {
			if i >= 0 {
				st.Denied[i] += s.led.Denied(g)
			}
		}
		st.Attached += s.led.NInUse()
		if perSession {
			ss := SessionStats{ID: s.rec.ID, UUIDs: s.rec.GPUs}
			for g := range s.rec.GPUs {
				ss.Limit = append(ss.Limit, s.led.Limit(g))
				ss.Used = append(ss.Used, s.led.Used(g))
				ss.Peak = append(ss.Peak, s.led.Peak(g))
			}
			st.PerSess = append(st.PerSess, ss)
		}
	}
	return st
}
