/* Allocator context: sbatch and salloc. Both create a new job, so the
 * quota from --gpu-mem (or default=) becomes that job's quota. */
#include "gs.h"

int gs_allocator_post_opt(spank_t sp)
{
	uint64_t bytes;

	if (gs_submit_quota(&bytes) < 0)
		return -1;
	if (bytes == 0)
		return 0;
	return gs_submit_publish(sp, bytes);
}
