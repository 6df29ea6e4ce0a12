package prolog

import "github.com/gpuslice/gpuslice/internal/api"

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
	c, err := api.ParseCompute(getenv(EnvCompute), getenv(EnvComputeMax))
	if err != nil {
		return nil
	}
	return c
}
