/*
 * What a context answers about itself: device, flags, id, API version,
 * limits, cache configuration, stream priorities (ctx.c creates, destroys
 * and stacks contexts).
 */
#include "drv.h"
#include "timeline.h"

FC_API CUresult cuCtxGetDevice(CUdevice *device)
{
	FC_REQUIRE_CTX(c);
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*device = c->ordinal;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetFlags(unsigned int *flags)
{
	FC_REQUIRE_CTX(c);
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = c->flags;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSetFlags(unsigned int flags)
{
	FC_REQUIRE_CTX(c);
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	c->flags = flags;
	return CUDA_SUCCESS;
}

/* For queries on "ctx, or the current context when NULL": the context in
 * *ctx, CUDA_SUCCESS or the error (out is the caller's result pointer). */
static CUresult ctx_arg(CUcontext *ctx, const void *out)
{
	FC_CHECK_INIT();
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (*ctx == NULL)
		*ctx = fc_tls_ctx;
	return fc_ctx_valid(*ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

FC_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	CUresult r = ctx_arg(&ctx, ctxId);
	if (r == CUDA_SUCCESS)
		*ctxId = ctx->id;
	return r;
}

FC_API CUresult cuCtxSynchronize(void)
{
	CUcontext c;
	CUresult r = fc_require_ctx(&c);
	if (r == CUDA_SUCCESS)
		fc_tl_wait(c->phys, fc_tl_last(c->phys)); /* everything the process queued on the GPU */
	if (r == CUDA_SUCCESS)
		fc_pools_sync();
	return r;
}

FC_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUresult r = ctx_arg(&ctx, version);
	if (r == CUDA_SUCCESS)
		*version = 3020;
	return r;
}

FC_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	FC_REQUIRE_CTX(c);
	if ((unsigned)limit > CU_LIMIT_MAX_L2_FETCH_GRANULARITY + 2)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	c->limits[limit] = value;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	FC_REQUIRE_CTX(c);
	if (pvalue == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if ((unsigned)limit > CU_LIMIT_MAX_L2_FETCH_GRANULARITY + 2)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	*pvalue = c->limits[limit];
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	FC_REQUIRE_CTX(c);
	if (pconfig == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pconfig = c->cache;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	FC_REQUIRE_CTX(c);
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	c->cache = config;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	FC_REQUIRE_CTX(c);
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = -5;
	return CUDA_SUCCESS;
}
