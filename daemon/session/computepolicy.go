package session

import (
	"strings"

	"github.com/gpuslice/gpuslice/internal/api"
)

// computeFor is the GPU time share a new session gets. A request marked
// compute_policy (the Prolog's: what the job asked, from its own
// --gpu-compute / --gpu-compute-max) gets what the node's compute policy
// allows (Options.ComputePolicy, api.ComputePolicy.Apply): the default
// when it asked none, a request above the policy lowered to it and
// logged. It never fails: a failed Prolog drains the node. Any other
// request is root's own and is taken as given. limits are the session's
// quotas (UUID -> bytes).
func (m *Manager) computeFor(req api.SessionRequest, limits map[string]uint64) *api.Compute {
	if !req.ComputePolicy {
		return req.Compute
	}
	p := api.DefaultComputePolicy()
	if m.opt.ComputePolicy != nil {
		p = *m.opt.ComputePolicy
	}
	got, lowered := p.Apply(req.Compute, m.quotaFraction(limits))
	if len(lowered) > 0 {
		m.opt.Log.Warn("compute share lowered to the site's policy", "session", req.ID, "uid", req.UID,
			"asked", req.Compute.String(), "got", got.String(), "why", strings.Join(lowered, "; "))
	}
	return got
}

// quotaFraction is the smallest fraction of a GPU's memory the quotas
// hold, over the GPUs with a quota: what "proportional" allows on every
// one of them. 1 when none is known.
func (m *Manager) quotaFraction(limits map[string]uint64) float64 {
	f := 1.0
	for uuid, limit := range limits {
		i, ok := m.byUUID[uuid]
		if !ok || limit == 0 || m.gpus[i].Physical == 0 {
			continue
		}
		f = min(f, float64(min(limit, m.gpus[i].Physical))/float64(m.gpus[i].Physical))
	}
	return f
}
