package prolog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// A quota from plugstack.conf's default= is for jobs that get a share of a
// GPU (job_submit.lua schedules it as shards, like --gpu-mem). A job given
// whole GPUs (--gres=gpu:N, --gpus=N, ...) without --gpu-mem gets the
// whole GPUs and no session. Nothing in the Prolog's environment says
// which a job got (Slurm sets the same GPU variables for shards and whole
// GPUs), so the Prolog asks slurmctld for the job's GPU requests, once,
// and only for a job whose quota is the default.

// EnvQuotaDefault is set by the SPANK plugin beside SPANK_GPU_MEM: 1 when
// the quota is plugstack.conf's default=, 0 when it is the job's --gpu-mem.
const EnvQuotaDefault = "SPANK_GPU_MEM_DEFAULT"

// tresFields are the fields of `scontrol -o show job` that hold a job's
// GRES requests (gres:gpu:1 up to 22.05, gres/gpu:1 from 23.02 on).
var tresFields = []string{"TresPerNode=", "TresPerJob=", "TresPerTask=", "TresPerSocket="}

// HasWholeGPUs reports whether a job's `scontrol -o show job` line asks
// for gres/gpu (whole GPUs).
func HasWholeGPUs(line string) bool {
	for _, f := range strings.Fields(line) {
		for _, k := range tresFields {
			v, ok := strings.CutPrefix(f, k)
			if !ok {
				continue
			}
			for _, item := range strings.Split(v, ",") {
				item = strings.TrimPrefix(strings.TrimPrefix(item, "gres:"), "gres/")
				if name, _, _ := strings.Cut(item, ":"); name == "gpu" {
					return true
				}
			}
		}
	}
	return false
}

// WholeGPUs asks slurmctld (scontrol, bounded by timeout) whether job has
// whole GPUs.
func WholeGPUs(ctx context.Context, scontrol, job string, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, scontrol, "-o", "show", "job", job)
	cmd.Env = os.Environ() // slurmd's: SLURM_CONF when it set one
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return false, fmt.Errorf("%s -o show job %s: %w: %s", scontrol, job, err, strings.TrimSpace(errb.String()))
	}
	if !strings.Contains(out.String(), "JobId="+job+" ") {
		return false, fmt.Errorf("%s -o show job %s: no such job in %q", scontrol, job, strings.TrimSpace(out.String()))
	}
	return HasWholeGPUs(out.String()), nil
}
