package prolog

import (
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/api"
)

// The SPANK plugin passes the job's GPU time share beside its quota
// (spank/compute.c): a percent, "proportional" or "off" (plugstack.conf's
// compute=), and a ceiling in percent (--gpu-compute-max or compute_cap=).
const (
	EnvCompute    = "SPANK_GPU_COMPUTE"
	EnvComputeMax = "SPANK_GPU_COMPUTE_MAX"
)

// ComputeFromEnv is the session's compute share; nil when the job has none.
// The plugin validated both at submit; a value that does not parse here
// (an older plugin, a hand-made environment) gives no share rather than a
// failed Prolog, which would drain the node.
func ComputeFromEnv(getenv func(string) string) *api.Compute {
	share := strings.TrimSpace(getenv(EnvCompute))
	c := &api.Compute{Mode: api.ComputeOff}
	switch share {
	case "", api.ComputeOff:
	case api.ComputeProportional:
		c.Mode = api.ComputeProportional
	default:
		p, err := strconv.Atoi(share)
		if err != nil {
			return nil
		}
		c.Mode, c.Percent = api.ComputePercent, p
	}
	if m := strings.TrimSpace(getenv(EnvComputeMax)); m != "" {
		p, err := strconv.Atoi(m)
		if err != nil {
			return nil
		}
		c.MaxPercent = p
	}
	if c.Validate() != nil || !c.Shared() {
		return nil
	}
	return c
}
