package session

import "github.com/gpuslice/gpuslice/internal/ledger"

// What a context costs on each GPU, as gpusliced measured it itself
// (daemon/ctxprobe). A new session's ledger starts with the figure, so its
// first process charges its contexts without loading NVML to measure them
// (docs/interceptor.md "What a context costs"). The figure comes from the
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
	v := m.ctxCost[i]
	return v - 1, v != 0
}

// ContextCostToMeasure lists the inventory GPUs whose context cost is not
// known and that no session holds: only those may be measured, since a
// measurement holds a context's memory for a moment.
func (m *Manager) ContextCostToMeasure() []int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []int
	for i := range m.gpus {
		if m.ctxCost[i] == 0 && m.count[i] == 0 {
			out = append(out, i)
		}
	}
	return out
}

// leaveContextCostLocked writes the known figures into a new session's
// ledger (gidx: ledger GPU -> inventory index). m.mu is held.
func (m *Manager) leaveContextCostLocked(led *ledger.Ledger, gidx []int) {
	for g, i := range gidx {
		if i >= 0 && m.ctxCost[i] != 0 {
			led.SetCtxCost(g, m.ctxCost[i]-1)
		}
	}
}
