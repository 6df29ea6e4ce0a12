package prolog

import "github.com/gpuslice/gpuslice/internal/api"

// The SPANK plugin passes the GPU time share the job asked for beside its
// quota (spank/compute.c): --gpu-compute (a percent) and --gpu-compute-max
// (a percent). They come from the job's own environment, which its owner
// controls: the Prolog passes them to gpusliced as a request
// (SessionRequest.ComputePolicy), and gpusliced gives the job what the
// site's compute policy allows (gpusliced.yaml compute_*).
const (
	EnvCompute    = "SPANK_GPU_COMPUTE"
	EnvComputeMax = "SPANK_GPU_COMPUTE_MAX"
)

// ComputeFromEnv is the share the job asked for; nil when it asked none.
// job_submit.lua refused a malformed one at submit; a value that does not
// parse here (an older plugin, a hand-made environment) counts as none
// asked (the site's default) rather than a failed Prolog, which would
// drain the node.
func ComputeFromEnv(getenv func(string) string) *api.Compute {
	c, err := api.ParseCompute(getenv(EnvCompute), getenv(EnvComputeMax))
	if err != nil {
		return nil
	}
	return c
}
