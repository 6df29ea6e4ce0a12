package session

import "github.com/gpuslice/gpuslice/daemon/store"

// DriverLimits puts a session's quotas, as the driver's own memory limit,
// on its job's cgroup where the driver has such limits (R615+; the daemon
// package's driverLimits). Neither call fails a session: what cannot be
// done is logged and counted by the implementation, and the interceptor
// and the audit enforce the quota as they do without it.
type DriverLimits interface {
	// Apply sets (or sets again, after a restart or a quota change) the
	// limits of rec on the GPUs gidx (ledger GPU -> inventory index).
	Apply(rec store.Record, gidx []int)
	// Remove clears them when the session ends.
	Remove(rec store.Record, gidx []int)
}

func (m *Manager) applyDriverLimits(rec store.Record, gidx []int) {
	if m.opt.DriverLimits != nil {
		m.opt.DriverLimits.Apply(rec, gidx)
	}
}

func (m *Manager) removeDriverLimits(rec store.Record, gidx []int) {
	if m.opt.DriverLimits != nil {
		m.opt.DriverLimits.Remove(rec, gidx)
	}
}
