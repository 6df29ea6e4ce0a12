// Package prolog holds the logic of the Slurm Prolog and Epilog programs
// (gpuslice-prolog, gpuslice-epilog). slurmd runs them as root with the
// job's description in the environment and no PATH; they create and
// release the job's gpusliced session through the admin API
// (internal/client).
//
// One session per job, named by the job id: every step and task of the job
// shares its quota; array tasks are separate jobs with their own ids.
package prolog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/api"
)

// EnvQuota is the variable through which the SPANK plugin passes the job's
// quota in bytes (spank_job_control_setenv("GPU_MEM") → SPANK_GPU_MEM).
const EnvQuota = "SPANK_GPU_MEM"

// Job is what the Prolog/Epilog know about the job.
type Job struct {
	ID string
	// UID owns the session (SLURM_JOB_UID).
	UID uint32
	// QuotaBytes per GPU; 0 means the job asked for no quota.
	QuotaBytes uint64
	// QuotaIsDefault: QuotaBytes is plugstack.conf's default=, not the
	// job's --gpu-mem (it applies only to a share of a GPU: wholegpu.go).
	QuotaIsDefault bool
	// GPUs are the job's GPUs as gres reports them (NVML indices or UUIDs);
	// empty means every GPU of the node.
	GPUs []string
	// Compute is its GPU time share (compute.go); nil: none.
	Compute *api.Compute
	// SLUID is the job's SLUID (EnvSLUID, Slurm 26.05+) as Slurm prints
	// it; empty when Slurm gives none or gives a malformed one.
	SLUID string
	// Node is the node this runs on (SLURMD_NODENAME); NodeList all the
	// job's nodes as Slurm gives them (SLURM_JOB_NODELIST, a compressed
	// hostlist), which gpusliced reads to place this node's figures in the
	// job's.
	Node     string
	NodeList string
	// NodeCount is the job's node count (SLURM_JOB_NUM_NODES; 0 when
	// Slurm gives none). Slurm 22.05 gives the Epilog no node list.
	NodeCount int
	// Refused: gpusliced refused the job's quota on this node (the
	// Prolog's refusal line; the Epilog sets it).
	Refused bool
}

// EnvSLUID is where slurmd (26.05+) gives the Prolog and Epilog the SLUID
// of this run of the job, the name of its cgroup v2 directory unless
// cgroup.conf has CgroupJobIdPaths=yes.
const EnvSLUID = "SLURM_JOB_SLUID"

// sluidFromEnv returns SLURM_JOB_SLUID as Slurm prints it, "" when unset
// or malformed (never a failed Prolog: the job's session simply has no
// SLUID, and identity falls back to the job's ancestry).
func sluidFromEnv(getenv func(string) string) string {
	s, _ := api.CanonicalSLUID(strings.TrimSpace(getenv(EnvSLUID)))
	return s
}

// ErrNoJob is returned when the environment does not describe a job.
var ErrNoJob = errors.New("not run by slurmd")

// JobFromEnv reads the job from slurmd's environment. defaultBytes is the
// quota of jobs whose SPANK_GPU_MEM is unset (0: none).
func JobFromEnv(getenv func(string) string, defaultBytes uint64) (Job, error) {
	var j Job
	j.ID = strings.TrimSpace(getenv("SLURM_JOB_ID"))
	if j.ID == "" {
		j.ID = strings.TrimSpace(getenv("SLURM_JOBID"))
	}
	if j.ID == "" {
		return Job{}, fmt.Errorf("%w: SLURM_JOB_ID is not set", ErrNoJob)
	}
	if !api.ValidSessionID(j.ID) {
		return Job{}, fmt.Errorf("SLURM_JOB_ID %q is not a valid session id", j.ID)
	}
	uid := strings.TrimSpace(getenv("SLURM_JOB_UID"))
	if uid == "" {
		return Job{}, fmt.Errorf("%w: SLURM_JOB_UID is not set", ErrNoJob)
	}
	u, err := strconv.ParseUint(uid, 10, 32)
	if err != nil {
		return Job{}, fmt.Errorf("SLURM_JOB_UID %q: not a uid", uid)
	}
	j.UID = uint32(u)
	j.Compute = ComputeFromEnv(getenv)
	j.SLUID = sluidFromEnv(getenv)
	j.Node = strings.TrimSpace(getenv("SLURMD_NODENAME"))
	j.NodeList = strings.TrimSpace(getenv("SLURM_JOB_NODELIST"))
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("SLURM_JOB_NUM_NODES"))); err == nil && n > 0 && n <= 1<<16 {
		j.NodeCount = n
	}

	j.QuotaBytes = defaultBytes
	if q := strings.TrimSpace(getenv(EnvQuota)); q != "" {
		b, err := strconv.ParseUint(q, 10, 64)
		if err != nil || b == 0 {
			return Job{}, fmt.Errorf("%s=%q: expected a positive number of bytes", EnvQuota, q)
		}
		j.QuotaBytes = b
		j.QuotaIsDefault = strings.TrimSpace(getenv(EnvQuotaDefault)) == "1"
	}

	gpus := getenv("SLURM_JOB_GPUS")
	if strings.TrimSpace(gpus) == "" {
		gpus = getenv("CUDA_VISIBLE_DEVICES")
	}
	j.GPUs, err = ParseGPUList(gpus)
	if err != nil {
		return Job{}, err
	}
	return j, nil
}

// ParseGPUList splits a gres GPU list ("0,2", "GPU-…,GPU-…"). An empty list,
// or Slurm's "NoDevFiles", means every GPU of the node (nil).
func ParseGPUList(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "NoDevFiles" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			return nil, fmt.Errorf("GPU list %q: empty entry", s)
		case isIndex(f), strings.HasPrefix(f, "GPU-") && len(f) > 4:
		default:
			return nil, fmt.Errorf("GPU list %q: %q is neither a GPU index nor a GPU-… UUID", s, f)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out, nil
}

func isIndex(s string) bool {
	if s == "" || len(s) > 4 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
