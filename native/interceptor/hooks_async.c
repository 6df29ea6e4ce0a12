/*
 * Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync and
 * their per-thread variants) and their frees: charged to the device the
 * memory lives on (the stream's, or the pool's), recorded as a pool's
 * allocation, whose free the pool keeps (poolkept.c; charge.h has the
 * protocol).
 */
#include "charge.h"

/* The device a stream's work runs on: the current context's for the NULL,
 * legacy and per-thread default streams, else the device of the stream's
 * context (made current for the question when it is not). */
static CUresult stream_device(CUstream s, CUdevice *dev)
{
	gs_pfn_cuCtxGetDevice getdev = GS_REAL(cuCtxGetDevice);
	if (getdev == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return getdev(dev);
	gs_pfn_cuStreamGetCtx getctx = GS_REAL(cuStreamGetCtx);
	gs_pfn_cuCtxGetCurrent getcur = GS_REAL(cuCtxGetCurrent);
	gs_pfn_cuCtxPushCurrent_v2 push = GS_REAL(cuCtxPushCurrent_v2);
	gs_pfn_cuCtxPopCurrent_v2 pop = GS_REAL(cuCtxPopCurrent_v2);
	if (getctx == NULL || getcur == NULL || push == NULL || pop == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUcontext sc = NULL, cur = NULL;
	CUresult r = getctx(s, &sc);
	if (r != CUDA_SUCCESS)
		return r;
	if (getcur(&cur) == CUDA_SUCCESS && cur == sc)
		return getdev(dev);
	r = push(sc);
	if (r != CUDA_SUCCESS)
		return r;
	r = getdev(dev);
	CUcontext popped;
	pop(&popped);
	return r;
}

/* A pool's allocation of n bytes on the device of stream s (the device's
 * current pool). */
static CUresult charge_stream(struct charge *c, int st, CUstream s, uint64_t n)
{
	c->active = 0;
	if (n == 0)
		return CUDA_SUCCESS;
	if (GS_UNLIKELY(st != GS_ST_ACTIVE) && gs_failed_retry() != GS_ST_ACTIVE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUdevice dev;
	CUresult r = stream_device(s, &dev);
	if (r != CUDA_SUCCESS)
		return r;
	return charge_dev_as(c, GS_ST_ACTIVE, dev, n, 1);
}

/* The same from pool, on its device (as recorded when the pool was
 * created or looked up); a pool never seen goes to the stream's device, a
 * pool of host memory is not charged. */
static CUresult charge_pool(struct charge *c, int st, CUmemoryPool pool, CUstream s, uint64_t n)
{
	c->active = 0;
	int where = gs_pool_where((uint64_t)(uintptr_t)pool);
	if (where >= 0)
		return charge_dev_as(c, st, where, n, 1);
	if (where == GS_POOL_HOST)
		return CUDA_SUCCESS;
	return charge_stream(c, st, s, n);
}

/* After a pool's real allocator: give back when it failed, else record
 * key as pool memory (the shared table: its free keeps the bytes). -1 when
 * the table is full. */
static int finish_pool(struct charge *c, CUresult r, uint64_t key)
{
	if (!c->active)
		return 0;
	if (r != CUDA_SUCCESS) {
		gs_kept_put(c->g, c->kept);
		driver_refused(c->g, c->n, r);
		return 0;
	}
	return gs_tab_insert_val(GS_TAB_PTR, key, gs_val_pack(c->g, c->n + c->kept) | GS_VAL_POOL);
}

/* stream-ordered: the stream's device, or the pool's; when the allocation
 * cannot be recorded it is freed into its pool, which keeps it */
#define GS_CHARGED_ASYNC_ALLOC(sym, call_args, reserve, freesym, ...)                          \
	GS_CHARGED_CREATE_WITH(sym, sym, (CUdeviceptr * dptr, size_t bytesize, __VA_ARGS__), call_args, \
			       reserve, finish_pool, *dptr, refuse_pool(GS_R_##freesym, &c, dptr, stream))

typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

/* The pool allocation could not be recorded: free it into its pool, which
 * keeps it (still charged, as kept), and refuse. */
static __attribute__((noinline, cold)) CUresult refuse_pool(int ridx, struct charge *c, CUdeviceptr *dptr,
							   CUstream s)
{
	free_async_fn fr = (free_async_fn)gs_real_get(ridx);
	if (fr != NULL)
		fr(*dptr, s);
	gs_kept_put(c->g, c->n + c->kept);
	gs_table_full();
	*dptr = 0;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

GS_CHARGED_ASYNC_ALLOC(cuMemAllocAsync, (dptr, bytesize, stream), charge_stream(&c, st, stream, bytesize),
		       cuMemFreeAsync, CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocAsync_ptsz, (dptr, bytesize, stream), charge_stream(&c, st, stream, bytesize),
		       cuMemFreeAsync_ptsz, CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocFromPoolAsync, (dptr, bytesize, pool, stream),
		       charge_pool(&c, st, pool, stream, bytesize), cuMemFreeAsync, CUmemoryPool pool,
		       CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, (dptr, bytesize, pool, stream),
		       charge_pool(&c, st, pool, stream, bytesize), cuMemFreeAsync_ptsz, CUmemoryPool pool,
		       CUstream stream)
#define GS_PTR_FREE(sym, call_args, ...) \
	GS_RELEASE(sym, (CUdeviceptr dptr, ##__VA_ARGS__), call_args, dptr)

GS_PTR_FREE(cuMemFreeAsync, (dptr, stream), CUstream stream)
GS_PTR_FREE(cuMemFreeAsync_ptsz, (dptr, stream), CUstream stream)
