/*
 * Memory the driver frees with a context. cuCtxDestroy (and the cuCtxDetach
 * that drops a created context's last usage count) frees every
 * cuMemAlloc / cuMemAllocManaged / cuMemAllocPitch allocation and every
 * array of the context; cuDevicePrimaryCtxReset does the same for the
 * device's primary context, and cuDevicePrimaryCtxRelease when it drops the
 * last reference. Allocations from memory pools (cuMemAllocAsync,
 * cuMemAllocFromPoolAsync) and VMM handles (cuMemCreate) belong to no
 * context and survive (the driver's documentation says so).
 *
 * Each of these hooks, with gs_ctx_mu held:
 *  1. finds the context's charged allocations and takes them out of their
 *     tables, before the driver frees anything: device pointers by asking
 *     the driver (cuPointerGetAttribute: the context, the pool, the buffer
 *     id) for every entry of the pointer table, arrays by the context
 *     recorded when they were created;
 *  2. calls the driver;
 *  3. gives back what is gone: a pointer whose buffer id the driver no
 *     longer reports (error or another buffer), an array when the context
 *     is known to be gone (the call succeeded; for a release, the primary
 *     context is inactive afterwards; for a detach, the driver no longer
 *     knows the context), and then the context's own cost (ctxcost.c).
 *     What is still there goes back into its table.
 * Taking the entries out first is what cuMemFree's hook does too: a
 * concurrent free of the same pointer finds no entry and passes through,
 * so the bytes are released once; and no entry for an address the driver
 * has freed is left in the table for another thread's new allocation at
 * that address to be confused with. The cuMemAlloc / cuMemFree path is
 * unchanged: the scan only reads the table and takes entries with the
 * same compare-and-swap a free uses.
 */
#include <stdlib.h>

#include "gs.h"

enum { V_PTR, V_ARRAY, V_MIPMAP };

struct victim {
	uint64_t key; /* device pointer or array handle */
	uint64_t val; /* packed (GPU, bytes) */
	uint64_t aux; /* pointer: its buffer id; array: its context */
	int kind;
};

struct victims {
	struct victim *v;
	size_t n, cap;
	int full; /* out of memory: the rest stays charged */
};

static unsigned char sweep_oom_warned;

/* Room for one more; 0 when there is none (the entry is then left alone). */
static int victims_room(struct victims *vs)
{
	if (vs->n < vs->cap)
		return 1;
	if (vs->full)
		return 0;
	size_t cap = vs->cap ? vs->cap * 2 : 64;
	struct victim *v = realloc(vs->v, cap * sizeof(*v));
	if (v == NULL) {
		vs->full = 1;
		if (!__atomic_exchange_n(&sweep_oom_warned, 1, __ATOMIC_RELAXED))
			gs_log("out of memory while a context is torn down: its allocations stay charged "
			       "until the process exits");
		return 0;
	}
	vs->v = v;
	vs->cap = cap;
	return 1;
}

/* The buffer id of the live allocation at ptr; 0 when there is none. */
static uint64_t buffer_id(gs_pfn_cuPointerGetAttribute attr, uint64_t ptr)
{
	unsigned long long id = 0;
	if (attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) != CUDA_SUCCESS)
		return 0;
	return id;
}

/* ptr is charged and belongs to ctx (not to a pool): take its entry. */
static void take_ptr(struct victims *vs, gs_pfn_cuPointerGetAttribute attr, CUcontext ctx, uint64_t ptr)
{
	CUcontext owner = NULL;
	if (attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)ptr) != CUDA_SUCCESS || owner != ctx)
		return;
	CUmemoryPool pool = NULL;
	if (attr(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)ptr) == CUDA_SUCCESS && pool != NULL)
		return; /* pool memory outlives the context */
	uint64_t id = buffer_id(attr, ptr);
	if (id == 0 || !victims_room(vs))
		return; /* cannot tell later whether it is gone: leave it charged */
	uint64_t v = gs_ptr_remove(ptr);
	if (v == 0)
		return; /* freed meanwhile */
	vs->v[vs->n++] = (struct victim){.key = ptr, .val = v, .aux = id, .kind = V_PTR};
}

/* Every charged device pointer of ctx (gs_ctx_mu held). */
static void take_ptrs(struct victims *vs, CUcontext ctx)
{
	gs_pfn_cuPointerGetAttribute attr = GS_REAL(cuPointerGetAttribute);
	struct gs_tab *t = &gs_tabs[GS_TAB_PTR];
	if (attr == NULL || t->e == NULL)
		return;
	gs_front_flush_all(); /* the threads' fronts into the table walked here */
	for (uint64_t i = 0; i <= t->mask; i++) {
		uint64_t k = __atomic_load_n(&t->e[i].key, __ATOMIC_ACQUIRE);
		if (k != GS_KEY_EMPTY && k != GS_KEY_TOMB)
			take_ptr(vs, attr, ctx, k);
	}
	if (__atomic_load_n(&t->novf, __ATOMIC_ACQUIRE) == 0)
		return;
	/* the overflow array: its keys are copied under its lock, then taken
	 * like the others (gs_tab_remove looks there too) */
	uint64_t *keys = malloc(GS_OVF_ENTRIES * sizeof(*keys));
	if (keys == NULL)
		return;
	unsigned n = 0;
	pthread_mutex_lock(&t->mu);
	for (unsigned i = 0; i < GS_OVF_ENTRIES; i++)
		if (t->ovf[i].key != GS_KEY_EMPTY)
			keys[n++] = t->ovf[i].key;
	pthread_mutex_unlock(&t->mu);
	for (unsigned i = 0; i < n; i++)
		take_ptr(vs, attr, ctx, keys[i]);
	free(keys);
}

/* Every array and mipmapped array created in ctx (gs_ctx_mu held, so the
 * tables do not change meanwhile). */
static void take_arrays(struct victims *vs, CUcontext ctx)
{
	static const int kinds[2][2] = {{GS_XTAB_ARRAY, V_ARRAY}, {GS_XTAB_MIPMAP, V_MIPMAP}};
	for (int j = 0; j < 2; j++) {
		struct gs_xtab *t = &gs_xtabs[kinds[j][0]];
		if (t->e == NULL)
			continue;
		for (uint64_t i = 0; i <= t->mask; i++) {
			struct gs_xent *e = &t->e[i];
			uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
			if (k == GS_KEY_EMPTY || k == GS_KEY_TOMB ||
			    __atomic_load_n(&e->b, __ATOMIC_ACQUIRE) != (uint64_t)(uintptr_t)ctx)
				continue;
			uint64_t v = __atomic_load_n(&e->a, __ATOMIC_ACQUIRE);
			if (!victims_room(vs))
				return;
			if (gs_xtab_take(e, k))
				vs->v[vs->n++] = (struct victim){
					.key = k, .val = v, .aux = (uint64_t)(uintptr_t)ctx, .kind = kinds[j][1]};
		}
	}
}

static unsigned char putback_full_warned;

static void put_back(const struct victim *x)
{
	int ok;
	if (x->kind == V_PTR)
		ok = gs_tab_insert(GS_TAB_PTR, x->key, gs_val_gpu(x->val), gs_val_bytes(x->val)) == 0;
	else
		ok = gs_xtab_insert(x->kind == V_ARRAY ? GS_XTAB_ARRAY : GS_XTAB_MIPMAP, x->key, x->val, x->aux) !=
		     NULL;
	if (!ok && !__atomic_exchange_n(&putback_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("allocation table full: %llu bytes stay charged until the process exits",
		       (unsigned long long)gs_val_bytes(x->val));
}

/*
 * After the driver call: give back what is gone, put back the rest.
 * arrays_gone says whether the context's arrays went with it. A pointer is
 * gone when the driver no longer reports its buffer id at its address; one
 * still there goes back into the table (asked first, then put back, so a
 * concurrent free in between leaves it charged rather than released twice).
 */
static void settle(struct victims *vs, int arrays_gone, const char *what)
{
	gs_pfn_cuPointerGetAttribute attr = GS_REAL(cuPointerGetAttribute);
	uint64_t freed = 0, kept = 0;
	for (size_t i = 0; i < vs->n; i++) {
		const struct victim *x = &vs->v[i];
		int gone = x->kind == V_PTR ? attr == NULL || buffer_id(attr, x->key) != x->aux : arrays_gone;
		if (gone) {
			gs_unreserve(gs_val_gpu(x->val), gs_val_bytes(x->val));
			freed += gs_val_bytes(x->val);
		} else {
			put_back(x);
			kept += gs_val_bytes(x->val);
		}
	}
	if (vs->n > 0)
		gs_debug("%s: %zu allocations, %llu bytes given back, %llu still held", what, vs->n,
			 (unsigned long long)freed, (unsigned long long)kept);
	free(vs->v);
	vs->v = NULL;
	vs->n = vs->cap = 0;
}

/* The primary context of dev while it is active (gs_ctx_mu held, so no
 * hooked release or reset runs meanwhile); NULL when it is not. The
 * reference taken to learn it is dropped at once. */
static CUcontext primary_of(CUdevice dev)
{
	gs_pfn_cuDevicePrimaryCtxGetState state = GS_REAL(cuDevicePrimaryCtxGetState);
	gs_pfn_cuDevicePrimaryCtxRetain retain = GS_REAL(cuDevicePrimaryCtxRetain);
	gs_pfn_cuDevicePrimaryCtxRelease_v2 release = GS_REAL(cuDevicePrimaryCtxRelease_v2);
	if (release == NULL)
		release = GS_REAL(cuDevicePrimaryCtxRelease);
	unsigned int flags;
	int active = 0;
	CUcontext c = NULL;
	if (state == NULL || retain == NULL || release == NULL ||
	    state(dev, &flags, &active) != CUDA_SUCCESS || !active)
		return NULL;
	if (retain(&c, dev) != CUDA_SUCCESS)
		return NULL;
	release(dev);
	return c;
}

/* 1 when dev's primary context is known to be inactive. */
static int primary_inactive(CUdevice dev)
{
	gs_pfn_cuDevicePrimaryCtxGetState state = GS_REAL(cuDevicePrimaryCtxGetState);
	unsigned int flags;
	int active = 1;
	return state != NULL && state(dev, &flags, &active) == CUDA_SUCCESS && !active;
}

static void take_all(struct victims *vs, CUcontext ctx)
{
	if (ctx == NULL)
		return;
	take_ptrs(vs, ctx);
	take_arrays(vs, ctx);
}

/* 1 when the driver no longer knows ctx (destroyed). */
static int ctx_gone(CUcontext ctx)
{
	gs_pfn_cuCtxGetApiVersion ver = GS_REAL(cuCtxGetApiVersion);
	unsigned int v;
	return ver != NULL && ver(ctx, &v) == CUDA_ERROR_INVALID_CONTEXT;
}

/*
 * One shape for all of them: take the context's allocations out (ctx_expr
 * names the context, NULL when there is none to take from), call the
 * driver, settle (gone_expr says whether the context's resources went with
 * it; r is the driver's result), and then give back the context's own cost
 * (cost_stmt, run when they went).
 */
#define GS_CTX_TEARDOWN(sym, type, arg, ctx_expr, gone_expr, cost_stmt)      \
	CUresult sym(type arg)                                               \
	{                                                                    \
		gs_pfn_##sym real = GS_REAL(sym);                            \
		if (GS_UNLIKELY(real == NULL))                               \
			return CUDA_ERROR_NOT_INITIALIZED;                   \
		if (gs_state() != GS_ST_ACTIVE)                              \
			return real(arg);                                    \
		struct victims vs = {0};                                     \
		pthread_mutex_lock(&gs_ctx_mu);                              \
		take_all(&vs, (ctx_expr));                                   \
		CUresult r = real(arg);                                      \
		int gone = (gone_expr);                                      \
		settle(&vs, gone, #sym);                                     \
		if (gone) {                                                  \
			cost_stmt;                                           \
		}                                                            \
		pthread_mutex_unlock(&gs_ctx_mu);                            \
		return r;                                                    \
	}

GS_CTX_TEARDOWN(cuCtxDestroy_v2, CUcontext, ctx, ctx, r == CUDA_SUCCESS, gs_ctxcost_release(ctx))
GS_CTX_TEARDOWN(cuCtxDestroy, CUcontext, ctx, ctx, r == CUDA_SUCCESS, gs_ctxcost_release(ctx))

/* cuCtxDetach destroys the context when it drops its last usage count:
 * the driver no longer knows it afterwards. */
GS_CTX_TEARDOWN(cuCtxDetach, CUcontext, ctx, ctx, r == CUDA_SUCCESS && ctx_gone(ctx), gs_ctxcost_release(ctx))

/* Reset frees the primary context's memory whatever its reference count
 * (and destroys its resources: the next retain charges it again). */
GS_CTX_TEARDOWN(cuDevicePrimaryCtxReset_v2, CUdevice, dev, primary_of(dev), r == CUDA_SUCCESS,
		gs_ctxcost_primary_release(dev))
GS_CTX_TEARDOWN(cuDevicePrimaryCtxReset, CUdevice, dev, primary_of(dev), r == CUDA_SUCCESS,
		gs_ctxcost_primary_release(dev))

/* A release frees the memory only when it dropped the last reference: the
 * primary context is inactive afterwards. Pointers are asked one by one
 * either way. */
GS_CTX_TEARDOWN(cuDevicePrimaryCtxRelease_v2, CUdevice, dev, primary_of(dev),
		r == CUDA_SUCCESS && primary_inactive(dev), gs_ctxcost_primary_release(dev))
GS_CTX_TEARDOWN(cuDevicePrimaryCtxRelease, CUdevice, dev, primary_of(dev),
		r == CUDA_SUCCESS && primary_inactive(dev), gs_ctxcost_primary_release(dev))
