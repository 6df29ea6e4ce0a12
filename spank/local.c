/* Local context: srun. Outside an allocation srun creates the job and the
 * quota is set like sbatch/salloc. Inside an allocation (SLURM_JOB_ID set:
 * a batch script, an salloc shell) the job already exists and its Prolog
 * has run: the quota belongs to the job and every step shares it. A
 * --gpu-mem that disagrees with it is refused rather than silently
 * ignored.
 *
 * srun runs a step of an existing job when SLURM_JOB_ID is set or --jobid
 * is given, and creates a new job otherwise (SLURM_JOBID alone does not
 * make it a step: Slurm 22.05's srun reads only SLURM_JOB_ID). Without
 * SLURM_JOB_ID the quota of whatever job srun was started from is
 * forgotten, as in sbatch/salloc: a new job gets only its own --gpu-mem
 * (or default=); a step attached with --jobid from there finds its job's
 * quota through gpusliced (remote.c). */
#include "gs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* SLURM_SPANK_GPU_MEM holds a plain byte count (gs_submit_publish). */
static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !isdigit((unsigned char)s[0]))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end != '\0' || v == 0)
		return -1;
	*out = v;
	return 0;
}

static int check_in_allocation(const char *job)
{
	const char *v = gs_option_value();
	const char *jobq = getenv(GS_JOB_ENV_VAR);
	uint64_t want, have;
	char human[32];

	if (!v)
		return 0;
	if (gs_submit_quota(&want) < 0)
		return -1;
	if (parse_bytes(jobq, &have) < 0) {
		gs_error("--gpu-mem=%s: job %s was submitted without a GPU memory quota; "
			 "the quota is set per job (sbatch/salloc --gpu-mem) and shared by all its steps",
			 v, job);
		return -1;
	}
	if (want != have) {
		gs_format_size(have, human, sizeof(human));
		gs_error("--gpu-mem=%s differs from job %s's quota of %s: all steps of a job share the "
			 "quota set at submission; drop --gpu-mem from this srun",
			 v, job, human);
		return -1;
	}
	return 0;
}

/* The job srun runs in when it was started inside an allocation, NULL
 * when srun creates a new job (or attaches with --jobid from outside). */
static const char *allocation_job(void)
{
	const char *job = getenv("SLURM_JOB_ID");

	return job && *job ? job : NULL;
}

int gs_local_init(spank_t sp)
{
	if (allocation_job())
		return 0;
	return gs_submit_forget_inherited(sp);
}

int gs_local_post_opt(spank_t sp)
{
	const char *job = allocation_job();
	uint64_t bytes;

	if (job)
		return check_in_allocation(job);
	if (gs_submit_quota(&bytes) < 0)
		return -1;
	if (bytes == 0)
		return gs_submit_forget_inherited(sp);
	return gs_submit_publish(sp, bytes);
}
