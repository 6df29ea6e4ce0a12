package prolog

import "strings"

// A quota from plugstack.conf's default= is for jobs that get a share of a
// GPU (job_submit.lua schedules it as shards, like --gpu-mem). A job given
// whole GPUs (--gres=gpu:N, --gpus=N, ...) without --gpu-mem gets the
// whole GPUs and no session.
//
// The Prolog tells the two apart without asking Slurm anything (SchedMD's
// Prolog and Epilog Guide: no Slurm commands in a Prolog). Slurm gives it
// the same GPU variables for shards and whole GPUs, and job_submit.lua
// cannot add to the job's SPANK environment; what job_submit.lua can set
// and every release from 22.05 on hands the Prolog is the job's comment
// (SLURM_JOB_COMMENT). So job_submit.lua ends the comment of a job with
// whole GPUs and the default quota with WholeGPUsNote, after the user's
// own comment, removes the note from whatever comment a user writes (at
// submission, and in a later `scontrol update comment=`) and keeps it on
// the job that has it. The Prolog trusts the note only for a job whose
// quota is the default (SPANK_GPU_MEM_DEFAULT=1): a quota from --gpu-mem
// applies whatever the job was given.

// EnvQuotaDefault is set by the SPANK plugin beside SPANK_GPU_MEM: 1 when
// the quota is plugstack.conf's default=, 0 when it is the job's --gpu-mem.
const EnvQuotaDefault = "SPANK_GPU_MEM_DEFAULT"

// EnvComment is where slurmd gives the Prolog the job's comment.
const EnvComment = "SLURM_JOB_COMMENT"

// WholeGPUsNote ends the comment job_submit.lua gives a job with whole
// GPUs whose quota is the default (gpuslice.whole_gpus_note there).
const WholeGPUsNote = "gpuslice=whole-gpus"

// HasWholeGPUsNote reports whether a job's comment ends with the note, as
// job_submit.lua writes it: alone, or after the user's comment and a space.
func HasWholeGPUsNote(comment string) bool {
	return comment == WholeGPUsNote || strings.HasSuffix(comment, " "+WholeGPUsNote)
}

// DefaultQuotaWaived reports whether the job's quota is the default and
// the job was given whole GPUs: it then gets no session.
func DefaultQuotaWaived(job Job, getenv func(string) string) bool {
	return job.QuotaIsDefault && HasWholeGPUsNote(getenv(EnvComment))
}
