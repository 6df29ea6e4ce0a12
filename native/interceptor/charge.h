/*
 * What the charging hooks share (docs/ledger.md, "Protocol on the hot
 * path"): reserve in the ledger with one CAS before the real allocator is
 * called; the hook gives the bytes back if the driver failed.
 *
 * The hooks by concern: hooks_ptr.c (device pointers, stream-ordered
 * allocations), hooks_pool.c (where a memory pool lives), hooks_vmm.c
 * (physical handles and mappings), hooks_array.c (arrays), hooks_ctx.c
 * (what the driver frees with a context).
 */
#ifndef GPUSLICE_CHARGE_H
#define GPUSLICE_CHARGE_H

#include "gs.h"

struct charge {
	int active; /* bytes reserved */
	int g;      /* ledger GPU */
	uint64_t n; /* bytes */
};


/* Reserve n bytes on device dev for a charged allocation. CUDA_SUCCESS
 * means: call the driver (c->active says whether bytes are held). */
GS_INLINE CUresult charge_dev(struct charge *c, int st, int dev, uint64_t n)
{
	c->active = 0;
	if (n == 0)
		return CUDA_SUCCESS; /* nothing to charge; the driver answers */
	if (GS_UNLIKELY(st != GS_ST_ACTIVE) && gs_failed_retry() != GS_ST_ACTIVE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int g = gs_dev_to_gpu(dev);
	if (GS_UNLIKELY(g < 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (gs_reserve(g, n) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->active = 1;
	c->g = g;
	c->n = n;
	return CUDA_SUCCESS;
}

/* The same on the current context's device. */
GS_INLINE CUresult charge_ctx(struct charge *c, int st, uint64_t n)
{
	c->active = 0;
	if (n == 0)
		return CUDA_SUCCESS;
	if (GS_UNLIKELY(st != GS_ST_ACTIVE) && gs_failed_retry() != GS_ST_ACTIVE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gs_pfn_cuCtxGetDevice getdev = GS_REAL(cuCtxGetDevice);
	CUdevice dev;
	CUresult r = getdev != NULL ? getdev(&dev) : CUDA_ERROR_NOT_INITIALIZED;
	if (r != CUDA_SUCCESS)
		return r;
	return charge_dev(c, GS_ST_ACTIVE, dev, n);
}

/* The driver refused n bytes reserved on ledger GPU g: they go back, and
 * when it said out-of-memory (the GPU is short of what the quota allowed)
 * gpusliced is told. */
GS_INLINE void driver_refused(int g, uint64_t n, CUresult r)
{
	gs_unreserve(g, n);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		gs_short(g);
}

static inline uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t add_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

#endif
