/*
 * Contexts: one primary context per device (retain/release/flags/state/reset)
 * and created contexts, with a per-thread context stack.
 *
 * Each context costs device memory, as on a real GPU (FAKECUDA_CTX_BYTES,
 * state.c): charged when it is created (a primary context: when its first
 * reference is taken), given back when it is destroyed (cuCtxDestroy, the
 * last cuCtxDetach, the last primary release) and when cuDevicePrimaryCtxReset
 * destroys the primary context's resources; a primary context still
 * referenced after a reset is charged again at its next retain. A context
 * that does not fit on the device is refused with CUDA_ERROR_OUT_OF_MEMORY.
 */
#include "drv.h"
#include "exporttable.h"

#include <stdlib.h>
#include <string.h>

#define STACK_MAX 64

FC_HIDDEN __thread CUcontext fc_tls_ctx __attribute__((tls_model("initial-exec")));
static __thread CUcontext stack[STACK_MAX];
static __thread int depth;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary[FC_MAX_DEVICES];
static unsigned primary_refs[FC_MAX_DEVICES];
static unsigned primary_flags[FC_MAX_DEVICES];
static bool primary_charged[FC_MAX_DEVICES]; /* its cost is held (ctx_lock) */
static _Atomic unsigned long long next_ctx_id = 1;

static void set_top(void)
{
	fc_tls_ctx = depth > 0 ? stack[depth - 1] : NULL;
}

void fc_mark_ctx_on_device(unsigned phys)
{
	atomic_fetch_or(&fc_slot()->ctxmask, 1ULL << phys);
}

/* A context's fields, without counting it as one the process holds. */
static void ctx_fill(struct CUctx_st *c, CUdevice dev, unsigned flags, bool prim)
{
	memset(c, 0, sizeof(*c));
	c->ordinal = dev;
	c->phys = fc_visible[dev];
	c->flags = flags;
	c->primary = prim;
	c->id = atomic_fetch_add(&next_ctx_id, 1);
	c->limits[CU_LIMIT_STACK_SIZE] = 1024;
	c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
	c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
	atomic_thread_fence(memory_order_release);
	c->magic = FC_MAGIC_CTX;
}

static void ctx_init(struct CUctx_st *c, CUdevice dev, unsigned flags, bool prim)
{
	ctx_fill(c, dev, flags, prim);
	fc_mark_ctx_on_device(c->phys);
}

/* ---- primary contexts ---- */
FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	if (primary_refs[dev] == 0 || primary[dev].magic != FC_MAGIC_CTX)
		ctx_init(&primary[dev], dev, primary_flags[dev], true);
	if (!primary_charged[dev]) {
		fc_limtok lim;
		uint64_t cost = fc_ctx_charge(fc_visible[dev], &lim);
		if (cost == UINT64_MAX) {
			pthread_mutex_unlock(&ctx_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		primary[dev].cost = cost;
		primary[dev].lim = lim;
		primary_charged[dev] = true;
	}
	primary_refs[dev]++;
	pthread_mutex_unlock(&ctx_lock);
	*pctx = &primary[dev];
	return CUDA_SUCCESS;
}

/* The primary context's own cost goes (ctx_lock held). */
static void primary_uncharge_locked(CUdevice dev)
{
	if (primary_charged[dev]) {
		fc_ctx_uncharge(primary[dev].phys, primary[dev].cost, primary[dev].lim);
		primary[dev].cost = 0;
		primary_charged[dev] = false;
	}
}

static void primary_teardown(CUdevice dev)
{
	fc_cls_ctx_teardown(&primary[dev]);
	/* memory of the primary context goes with it, as on the real driver */
	fc_free_ctx_allocs(&primary[dev]);
}

FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	if (primary_refs[dev] == 0) {
		pthread_mutex_unlock(&ctx_lock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	bool last = --primary_refs[dev] == 0;
	if (last)
		primary_uncharge_locked(dev);
	pthread_mutex_unlock(&ctx_lock);
	if (last)
		primary_teardown(dev);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&ctx_lock);
	primary_flags[dev] = flags;
	primary[dev].flags = flags;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	FC_CHECK_INIT();
	if (flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	*flags = primary_flags[dev];
	*active = primary_refs[dev] > 0;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	primary_teardown(dev);
	pthread_mutex_lock(&ctx_lock);
	primary_uncharge_locked(dev); /* charged again at the next retain */
	primary_flags[dev] = 0;
	primary[dev].flags = 0;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

/* legacy entry points with the same ABI */
FC_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}
FC_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
FC_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- created contexts and the stack ---- */
FC_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pctx == NULL || (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (depth >= STACK_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c = malloc(sizeof(*c));
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fc_limtok lim;
	uint64_t cost = fc_ctx_charge(fc_visible[dev], &lim);
	if (cost == UINT64_MAX) {
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ctx_init(c, dev, flags, false);
	c->cost = cost;
	c->lim = lim;
	c->usage = 1;
	stack[depth++] = c;
	set_top();
	*pctx = c;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

/* Execution affinity (SM counts) is accepted and not modelled. */
static CUresult check_affinity(const CUexecAffinityParam *p, int n)
{
	if (n < 0 || (n > 0 && p == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++)
		if (p[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
			return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
			       CUdevice dev)
{
	FC_CHECK_INIT();
	CUresult r = check_affinity(paramsArray, numParams);
	return r != CUDA_SUCCESS ? r : cuCtxCreate_v2(pctx, flags, dev);
}

FC_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
	FC_CHECK_INIT();
	if (params != NULL) {
		if (params->cigParams != NULL)
			return CUDA_ERROR_NOT_SUPPORTED; /* no graphics interop here */
		CUresult r = check_affinity(params->execAffinityParams, params->numExecAffinityParams);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return cuCtxCreate_v2(pctx, flags, dev);
}

FC_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	FC_CHECK_INIT();
	if (!fc_ctx_valid(ctx) || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	fc_cls_ctx_teardown(ctx);
	fc_free_ctx_allocs(ctx);
	fc_ctx_uncharge(ctx->phys, ctx->cost, ctx->lim);
	ctx->cost = 0;
	/* drop it from this thread's stack; other threads find the magic gone */
	int w = 0;
	for (int r = 0; r < depth; r++)
		if (stack[r] != ctx)
			stack[w++] = stack[r];
	depth = w;
	set_top();
	ctx->magic = FC_MAGIC_DEAD; /* the handle stays readable; contexts are few */
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}

/* The deprecated usage count of a created context: cuCtxAttach takes one
 * more on the current context, cuCtxDetach drops one and destroys the
 * context with the last. */
FC_API CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
	FC_REQUIRE_CTX(c);
	if (pctx == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&ctx_lock);
	c->usage++;
	pthread_mutex_unlock(&ctx_lock);
	*pctx = c;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxDetach(CUcontext ctx)
{
	FC_CHECK_INIT();
	if (!fc_ctx_valid(ctx) || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&ctx_lock);
	bool last = ctx->usage <= 1;
	if (!last)
		ctx->usage--;
	pthread_mutex_unlock(&ctx_lock);
	return last ? cuCtxDestroy_v2(ctx) : CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	FC_CHECK_INIT();
	if (!fc_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (depth >= STACK_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	stack[depth++] = ctx;
	set_top();
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
	return cuCtxPushCurrent_v2(ctx);
}

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	FC_CHECK_INIT();
	if (depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = stack[--depth];
	set_top();
	if (pctx)
		*pctx = c;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

FC_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	FC_CHECK_INIT();
	if (ctx == NULL) {
		if (depth > 0)
			depth--;
		set_top();
		return CUDA_SUCCESS;
	}
	if (!fc_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (depth == 0)
		depth = 1;
	stack[depth - 1] = ctx;
	set_top();
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	FC_CHECK_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = fc_tls_ctx;
	return CUDA_SUCCESS;
}

/* For the runtime's private table (exporttable.c): the primary context's
 * handle exists from cuInit on, retained or not, as on the real driver; the
 * process holds a context (NVML lists it) once it retains it. */
CUresult fc_primary_ctx_peek(CUcontext *pctx, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	if (primary[dev].magic != FC_MAGIC_CTX)
		ctx_fill(&primary[dev], dev, primary_flags[dev], true);
	pthread_mutex_unlock(&ctx_lock);
	*pctx = &primary[dev];
	return CUDA_SUCCESS;
}
