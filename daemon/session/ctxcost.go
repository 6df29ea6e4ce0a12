package session

import (
	"time"

	"github.com/gpuslice/gpuslice/internal/ledger"
)

// What a context costs on each GPU, as gpusliced measured it itself
// (daemon/ctxprobe). A new session's ledger starts with the figure, so its
// first process charges its contexts without loading NVML to measure them
// (docs/charging.md "What a context costs"). The figure comes from the
// daemon's own probe, never from a job: a job can overwrite it in its own
// ledger, which changes only what that job's contexts are charged.

// SetContextCost records what a context costs on inventory GPU i. Sessions
// created from now on start with it; a figure larger than the GPU is not
// kept.
func (m *Manager) SetContextCost(i int, bytes uint64) {
	if i < 0 || i >= len(m.gpus) || bytes > m.gpus[i].Physical {
		return
	}
	m.mu.Lock()
	m.ctxCost[i] = bytes + 1
	m.mu.Unlock()
}

// ContextCost is what a context costs on inventory GPU i, when known.
func (m *Manager) ContextCost(i int) (uint64, bool) {
	if i < 0 || i >= len(m.gpus) {
		return 0, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ctxCostLocked(i)
}

// ctxCostLocked reads m.ctxCost[i] (the figure plus 1; 0: none). m.mu is
// held.
func (m *Manager) ctxCostLocked(i int) (uint64, bool) {
	v := m.ctxCost[i]
	return v - 1, v != 0
}

// ProbeWait bounds how long a create waits for a context probe that holds
// one of its GPUs (well under the Prolog's 5 s per call).
const ProbeWait = 3 * time.Second

// BeginContextProbe marks inventory GPU i as held by a context probe, if
// it may be measured now: no figure yet, no session on it, no other probe.
// Until EndContextProbe, a create on it waits (waitProbesLocked), so a
// measurement never overlaps a session there.
func (m *Manager) BeginContextProbe(i int) bool {
	if i < 0 || i >= len(m.gpus) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.measurableLocked(i) {
		return false
	}
	m.probing[i] = true
	return true
}

// measurableLocked: inventory GPU i has no figure, no session and no
// probe running. m.mu is held.
func (m *Manager) measurableLocked(i int) bool {
	_, known := m.ctxCostLocked(i)
	return !known && m.count[i] == 0 && !m.probing[i]
}

// EndContextProbe ends what BeginContextProbe began.
func (m *Manager) EndContextProbe(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probing[i] = false
	close(m.probeDone)
	m.probeDone = make(chan struct{})
}

// waitProbesLocked waits, at most ProbeWait, until no context probe holds
// a GPU of want (UUIDs). m.mu is held, and released while waiting.
func (m *Manager) waitProbesLocked(want map[string]uint64) {
	var deadline *time.Timer
	for {
		held := -1
		for uuid := range want {
			if i, ok := m.byUUID[uuid]; ok && m.probing[i] {
				held = i
			}
		}
		if held < 0 {
			return
		}
		if deadline == nil {
			deadline = time.NewTimer(ProbeWait)
			defer deadline.Stop()
		}
		done := m.probeDone
		m.mu.Unlock()
		select {
		case <-done:
			m.mu.Lock()
		case <-deadline.C:
			m.mu.Lock()
			m.opt.Log.Warn("a context probe still holds a GPU of a new session; creating it anyway", "gpu", held,
				"waited", ProbeWait)
			return
		}
	}
}

// ContextCostToMeasure lists the inventory GPUs that may be measured now
// (measurableLocked): a measurement holds a context's memory for a moment.
// BeginContextProbe checks again before each.
func (m *Manager) ContextCostToMeasure() []int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []int
	for i := range m.gpus {
		if m.measurableLocked(i) {
			out = append(out, i)
		}
	}
	return out
}

// leaveContextCostLocked writes the known figures into a new session's
// ledger (gidx: ledger GPU -> inventory index). m.mu is held.
func (m *Manager) leaveContextCostLocked(led *ledger.Ledger, gidx []int) {
	for g, i := range gidx {
		if i < 0 {
			continue
		}
		if c, ok := m.ctxCostLocked(i); ok {
			led.SetCtxCost(g, c)
		}
	}
}
