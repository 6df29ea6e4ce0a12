/* Allocator context: sbatch and salloc. Both create a new job, so the
 * quota from --gpu-mem (or default=) becomes that job's quota, and only
 * that: sbatch/salloc run inside a job with a quota (a batch script, an
 * salloc shell) inherit its SLURM_SPANK_GPU_MEM and the --gpu-mem Slurm
 * recorded for it, which Slurm would otherwise copy into the new job (its
 * Prolog would create a session with the outer job's quota) and read back
 * as the new job's --gpu-mem. slurm_spank_init runs before Slurm copies
 * SLURM_SPANK_* into the new job and before it reads options from the
 * environment, so that is where they are dropped. */
#include "gs.h"

int gs_allocator_init(spank_t sp)
{
	return gs_submit_forget_inherited(sp);
}

int gs_allocator_post_opt(spank_t sp)
{
	uint64_t bytes;

	if (gs_submit_quota(&bytes) < 0)
		return -1;
	if (bytes == 0)
		return gs_submit_forget_inherited(sp);
	return gs_submit_publish(sp, bytes);
}
