/*
 * fc_pool: stream-ordered pools keep what is freed into them as the
 * driver's pools do (docs/fakecuda.md): until a synchronisation gives back
 * what is above the release threshold, or cuMemPoolTrimTo; the device's
 * free memory counts what they keep. One event=check line per property.
 *
 *   fc_pool          the model (FAKECUDA_POOL_RESERVE unset)
 *   fc_pool nokeep   with FAKECUDA_POOL_RESERVE=0: a free gives back at once
 */
#include "common.h"
#include "drvctx.h"
#include "fc_check.h"
#include "cuda_ext.h"

static uint64_t pattr(CUmemoryPool p, CUmemPool_attribute a)
{
	cuuint64_t v = ~0ull;
	cuMemPoolGetAttribute(p, a, &v);
	return v;
}

static int holds(CUmemoryPool p, uint64_t reserved, uint64_t used)
{
	return pattr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == reserved &&
	       pattr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used;
}

static int threshold(CUmemoryPool p, cuuint64_t v)
{
	return cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v) == CUDA_SUCCESS;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const size_t mib = 1 << 20;
	CUcontext ctx;
	CUmemoryPool dp;
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuDeviceGetDefaultMemPool(&dp, 0) != CUDA_SUCCESS)
		return 1;
	size_t f0 = free_now();
	CUdeviceptr a = 0, b = 0;

	if (argc > 1 && strcmp(argv[1], "nokeep") == 0) {
		check("nokeep_free_gives_back", cuMemAllocAsync(&a, 100 * mib, NULL) == CUDA_SUCCESS &&
							free_now() == f0 - 100 * mib && cuMemFreeAsync(a, NULL) == CUDA_SUCCESS &&
							free_now() == f0 && holds(dp, 0, 0));
		return summary();
	}

	/* release threshold 0 (the default): kept until a synchronisation */
	check("alloc_grows_reserve", cuMemAllocAsync(&a, 100 * mib, NULL) == CUDA_SUCCESS &&
					     free_now() == f0 - 100 * mib && holds(dp, 100 * mib, 100 * mib));
	check("free_keeps", cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && free_now() == f0 - 100 * mib &&
				    holds(dp, 100 * mib, 0));
	check("alloc_reuses_kept", cuMemAllocAsync(&a, 60 * mib, NULL) == CUDA_SUCCESS &&
					   free_now() == f0 - 100 * mib && holds(dp, 100 * mib, 60 * mib));
	check("alloc_grows_by_the_shortfall", cuMemAllocAsync(&b, 60 * mib, NULL) == CUDA_SUCCESS &&
						      free_now() == f0 - 120 * mib && holds(dp, 120 * mib, 120 * mib));
	check("stream_sync_gives_back_unused",
	      cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuStreamSynchronize(NULL) == CUDA_SUCCESS &&
		      free_now() == f0 - 60 * mib && holds(dp, 60 * mib, 60 * mib));
	check("ctx_sync_gives_back_all", cuMemFreeAsync(b, NULL) == CUDA_SUCCESS && free_now() == f0 - 60 * mib &&
						 cuCtxSynchronize() == CUDA_SUCCESS && free_now() == f0 && holds(dp, 0, 0));

	/* a threshold: kept up to it across synchronisations; trim gives it back */
	check("threshold_keeps_up_to_it",
	      threshold(dp, 64 * mib) && cuMemAllocAsync(&a, 100 * mib, NULL) == CUDA_SUCCESS &&
		      cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS &&
		      free_now() == f0 - 64 * mib && holds(dp, 64 * mib, 0));
	check("trim_to_gives_back", cuMemPoolTrimTo(dp, 16 * mib) == CUDA_SUCCESS && holds(dp, 16 * mib, 0) &&
					    cuMemPoolTrimTo(dp, 0) == CUDA_SUCCESS && free_now() == f0 && holds(dp, 0, 0));
	check("threshold_max_keeps_all",
	      threshold(dp, ~0ull) && cuMemAllocAsync(&a, 200 * mib, NULL) == CUDA_SUCCESS &&
		      cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS &&
		      free_now() == f0 - 200 * mib && holds(dp, 200 * mib, 0));
	/* cuMemAlloc does not draw from a pool: what the pool keeps is not free */
	check("kept_is_not_free_to_cuMemAlloc", cuMemAlloc(&b, f0 - 100 * mib) == CUDA_ERROR_OUT_OF_MEMORY &&
							cuMemPoolTrimTo(dp, 0) == CUDA_SUCCESS &&
							cuMemAlloc(&b, f0 - 100 * mib) == CUDA_SUCCESS &&
							cuMemFree(b) == CUDA_SUCCESS);
	check("reserved_high", pattr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 200 * mib &&
				       cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
							     &(cuuint64_t){0}) == CUDA_SUCCESS &&
				       pattr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 0);

	/* a created pool: an event's synchronisation releases too; destroying
	 * it gives back what it kept */
	CUmemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CUmemoryPool cp;
	CUevent ev;
	check("created_pool_event_sync",
	      cuMemPoolCreate(&cp, &props) == CUDA_SUCCESS && cuEventCreate(&ev, 0) == CUDA_SUCCESS &&
		      cuMemAllocFromPoolAsync(&a, 50 * mib, cp, NULL) == CUDA_SUCCESS &&
		      cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && free_now() == f0 - 50 * mib &&
		      cuEventRecord(ev, NULL) == CUDA_SUCCESS && cuEventSynchronize(ev) == CUDA_SUCCESS &&
		      free_now() == f0 && holds(cp, 0, 0));
	check("destroy_gives_back_kept",
	      threshold(cp, ~0ull) && cuMemAllocFromPoolAsync(&a, 40 * mib, cp, NULL) == CUDA_SUCCESS &&
		      cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS &&
		      free_now() == f0 - 40 * mib && cuMemPoolDestroy(cp) == CUDA_SUCCESS && free_now() == f0);

	return summary();
}
