/*
 * Context creation: the primary context's retain and cuCtxCreate (every
 * version). The context's cost is reserved as ctxcost.c describes; a
 * context that does not fit the quota is undone (released or destroyed)
 * and refused with CUDA_ERROR_OUT_OF_MEMORY.
 */
#include "gs.h"

static unsigned char ctx_full_warned;

static void undo_primary(CUdevice dev)
{
	gs_pfn_cuDevicePrimaryCtxRelease_v2 rel = GS_REAL(cuDevicePrimaryCtxRelease_v2);
	if (rel != NULL)
		rel(dev);
	else if (GS_REAL(cuDevicePrimaryCtxRelease) != NULL)
		GS_REAL(cuDevicePrimaryCtxRelease)(dev);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	gs_pfn_cuDevicePrimaryCtxRetain real = GS_REAL(cuDevicePrimaryCtxRetain);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT)
		return real(pctx, dev);
	if (st != GS_ST_ACTIVE && gs_failed_retry() != GS_ST_ACTIVE)
		return real(pctx, dev); /* not attached: allocations fail anyway */
	pthread_mutex_lock(&gs_ctx_mu);
	CUresult r;
	if (gs_ctxcost_primary_charged(dev)) {
		r = real(pctx, dev);
	} else {
		struct gs_ctxcharge c;
		if (gs_ctxcost_begin(&c, dev) < 0) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			r = real(pctx, dev);
			if (gs_ctxcost_end(&c, r) < 0) {
				undo_primary(dev);
				r = CUDA_ERROR_OUT_OF_MEMORY;
			} else if (r == CUDA_SUCCESS) {
				gs_ctxcost_primary_set(&c);
			}
		}
		if (r == CUDA_ERROR_OUT_OF_MEMORY)
			gs_debug("primary context of device %d refused: its cost does not fit", dev);
	}
	pthread_mutex_unlock(&gs_ctx_mu);
	return r;
}

/* One shape for every cuCtxCreate: reserve, create, record (or undo). */
#define GS_CTX_CREATE(sym, params, call_args)                                     \
	CUresult sym params                                                       \
	{                                                                         \
		gs_pfn_##sym real = GS_REAL(sym);                                 \
		if (GS_UNLIKELY(real == NULL))                                    \
			return CUDA_ERROR_NOT_INITIALIZED;                        \
		int st = gs_state();                                              \
		if (st == GS_ST_INERT || pctx == NULL)                            \
			return real call_args;                                    \
		if (st != GS_ST_ACTIVE && gs_failed_retry() != GS_ST_ACTIVE)      \
			return real call_args;                                    \
		pthread_mutex_lock(&gs_ctx_mu);                                   \
		struct gs_ctxcharge c;                                            \
		CUresult r = CUDA_ERROR_OUT_OF_MEMORY;                            \
		if (!gs_ctxcost_room()) {                                         \
			if (!__atomic_exchange_n(&ctx_full_warned, 1, __ATOMIC_RELAXED)) \
				gs_log("context table full: new contexts are refused"); \
		} else if (gs_ctxcost_begin(&c, dev) == 0) {                      \
			r = real call_args;                                       \
			if (gs_ctxcost_end(&c, r) < 0) {                          \
				gs_pfn_cuCtxDestroy_v2 d = GS_REAL(cuCtxDestroy_v2); \
				if (d != NULL)                                    \
					d(*pctx);                                 \
				*pctx = NULL;                                     \
				r = CUDA_ERROR_OUT_OF_MEMORY;                     \
			} else if (r == CUDA_SUCCESS) {                           \
				gs_ctxcost_record(&c, *pctx);                     \
			}                                                         \
		}                                                                 \
		pthread_mutex_unlock(&gs_ctx_mu);                                 \
		return r;                                                         \
	}

GS_CTX_CREATE(cuCtxCreate, (CUcontext * pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))
GS_CTX_CREATE(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))
GS_CTX_CREATE(cuCtxCreate_v3,
	      (CUcontext * pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev),
	      (pctx, paramsArray, numParams, flags, dev))
GS_CTX_CREATE(cuCtxCreate_v4, (CUcontext * pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev),
	      (pctx, ctxCreateParams, flags, dev))
