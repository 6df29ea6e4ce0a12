package session

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/size"
)

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
	var refused []int
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
			refused = append(refused, i)
			msgs = append(msgs, fmt.Sprintf("GPU %d (%s): asked %s, %s free (%s capacity x overcommit %g, %s committed to %d other sessions)",
				i, uuid, size.Format(v), size.Format(free), size.Format(g.Physical), m.opt.Overcommit,
				size.Format(committed[i]), count[i]))
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		sort.Ints(refused)
		if m.ev.AdmissionRefuse != nil {
			m.ev.AdmissionRefuse()
		}
		return &Refusal{GPUs: refused, msg: fmt.Sprintf("%v: %s", api.ErrQuotaExceeded, strings.Join(msgs, "; "))}
	}
	return nil
}

// Refusal is a session refused for want of room on GPUs (inventory
// indices): api.ErrQuotaExceeded.
type Refusal struct {
	GPUs []int
	msg  string
}

func (r *Refusal) Error() string { return r.msg }
func (r *Refusal) Unwrap() error { return api.ErrQuotaExceeded }

// Holders names the sessions that hold the most of GPU i's room, largest
// first, at most max: the administrator's answer to a refusal (which jobs
// hold the memory, since when, and whether they ended and wait for their
// processes), for the log; the job refused is told the totals only.
func (m *Manager) Holders(i, max int) []string {
	if i < 0 || i >= len(m.gpus) {
		return nil
	}
	uuid := m.gpus[i].UUID
	type holder struct {
		s     *Session
		bytes uint64
	}
	var hs []holder
	m.mu.RLock()
	for _, s := range m.sessions {
		if v := s.rec.Limits[uuid]; v > 0 {
			hs = append(hs, holder{s, v})
		}
	}
	m.mu.RUnlock()
	sort.Slice(hs, func(a, b int) bool {
		if hs[a].bytes != hs[b].bytes {
			return hs[a].bytes > hs[b].bytes
		}
		return hs[a].s.rec.ID < hs[b].s.rec.ID
	})
	var out []string
	for _, h := range hs[:min(len(hs), max)] {
		h.s.mu.Lock()
		line := fmt.Sprintf("%s %s since %s", h.s.rec.ID, size.Format(h.bytes), h.s.rec.Created.UTC().Format(time.RFC3339))
		if h.s.deleting {
			line += " (released, waiting for its processes to end)"
		}
		h.s.mu.Unlock()
		out = append(out, line)
	}
	if len(hs) > max {
		out = append(out, fmt.Sprintf("and %d more", len(hs)-max))
	}
	return out
}

// committedLocked returns each GPU's committed bytes and session count,
// without session except. The totals are kept as sessions come, change
// and go (commitLocked), so an admission at 10,000 sessions reads a
// number per GPU instead of every session's quotas. Caller holds m.mu.
func (m *Manager) committedLocked(except string) ([]uint64, []int) {
	committed := append([]uint64(nil), m.committed...)
	count := append([]int(nil), m.count...)
	if s, ok := m.sessions[except]; ok && except != "" {
		for uuid, v := range s.rec.Limits {
			if i, ok := m.byUUID[uuid]; ok {
				committed[i] -= v
				count[i]--
			}
		}
	}
	return committed, count
}

// commitLocked adds (sign +1) or takes away (sign -1) a session's quotas
// from the committed totals. Caller holds m.mu for writing, around the
// change of m.sessions or of the session's limits it accounts for.
func (m *Manager) commitLocked(limits map[string]uint64, sign int) {
	for uuid, v := range limits {
		if i, ok := m.byUUID[uuid]; ok {
			if sign > 0 {
				m.committed[i] += v
			} else {
				m.committed[i] -= v
			}
			m.count[i] += sign
		}
	}
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
