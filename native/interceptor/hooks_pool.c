/*
 * Memory pools: which device a pool's allocations live on, remembered for
 * cuMemAllocFromPoolAsync (hooks_ptr.c).
 */
#include "gs.h"

static unsigned char pool_full_warned;

static void pool_table_full(void)
{
	if (!__atomic_exchange_n(&pool_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("memory pool table full: new pools are refused until some are destroyed");
}

/* Where a pool lives, remembered for cuMemAllocFromPoolAsync. */
static int pool_location(const CUmemPoolProps *props)
{
	if (props == NULL)
		return GS_POOL_UNKNOWN;
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return props->location.id;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return GS_POOL_HOST;
	default:
		return GS_POOL_UNKNOWN;
	}
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	gs_pfn_cuMemPoolCreate real = GS_REAL(cuMemPoolCreate);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(pool, poolProps);
	if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT &&
	    gs_pool_set((uint64_t)(uintptr_t)*pool, pool_location(poolProps)) < 0) {
		/* the table is full: a pool whose device is not known cannot be
		 * charged right, so it is not handed out */
		gs_pfn_cuMemPoolDestroy destroy = GS_REAL(cuMemPoolDestroy);
		if (destroy != NULL)
			destroy(*pool);
		*pool = NULL;
		pool_table_full();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	gs_pfn_cuMemPoolDestroy real = GS_REAL(cuMemPoolDestroy);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int where = gs_pool_where((uint64_t)(uintptr_t)pool);
	CUresult r = real(pool);
	if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT) {
		gs_pool_forget((uint64_t)(uintptr_t)pool);
		if (where >= 0) /* what it kept is the GPU's again */
			gs_kept_refresh(gs_dev_to_gpu(where), 0);
	}
	return r;
}

#define GS_DEVICE_POOL(sym)                                                           \
	CUresult sym(CUmemoryPool *pool, CUdevice dev)                                \
	{                                                                             \
		gs_pfn_##sym real = GS_REAL(sym);                                     \
		if (GS_UNLIKELY(real == NULL))                                        \
			return CUDA_ERROR_NOT_INITIALIZED;                            \
		CUresult r = real(pool, dev);                                         \
		if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT &&                 \
		    gs_pool_set((uint64_t)(uintptr_t)*pool, dev) < 0) {               \
			pool_table_full();                                            \
			return CUDA_ERROR_OUT_OF_MEMORY;                              \
		}                                                                     \
		return r;                                                             \
	}

GS_DEVICE_POOL(cuDeviceGetDefaultMemPool)
GS_DEVICE_POOL(cuDeviceGetMemPool)
