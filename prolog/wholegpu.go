package prolog

import (
	"bytes"
	"context"
	"errors"
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
// GPUs), so the Prolog asks slurmctld for the job's GPU requests (again
// when an answer is late: WholeGPUs), and only for a job whose quota is
// the default.

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

// WholeGPUs asks slurmctld (scontrol) whether job has whole GPUs: up to
// attempts tries, each bounded by timeout. A try that times out is tried
// again: slurmctld now and then answers one request seconds late (seen
// here: Slurm 24.11's scontrol taking 5.0 s for one call in 15 while the
// next answers in 8 ms), and a whole-GPU job must not get the default
// quota for it. Any other failure (no such job, scontrol missing) is
// returned at once.
func WholeGPUs(ctx context.Context, scontrol, job string, timeout time.Duration, attempts int) (bool, error) {
	var err error
	for i := 0; i < max(attempts, 1); i++ {
		var out string
		out, err = showJob(ctx, scontrol, job, timeout)
		if err == nil {
			return HasWholeGPUs(out), nil
		}
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			break
		}
	}
	return false, err
}

// showJob runs scontrol -o show job once, bounded by timeout.
func showJob(ctx context.Context, scontrol, job string, timeout time.Duration) (string, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, scontrol, "-o", "show", "job", job)
	cmd.Env = os.Environ() // slurmd's: SLURM_CONF when it set one
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if tctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", tctx.Err(), err)
		}
		return "", fmt.Errorf("%s -o show job %s: %w: %s", scontrol, job, err, strings.TrimSpace(errb.String()))
	}
	if !strings.Contains(out.String(), "JobId="+job+" ") {
		return "", fmt.Errorf("%s -o show job %s: no such job in %q", scontrol, job, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
