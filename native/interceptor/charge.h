/*
 * What the charging hooks share (docs/ledger.md, "Protocol on the hot
 * path"): reserve in the ledger with one CAS before the real allocator is
 * called; the hook gives the bytes back if the driver failed.
 *
 * The hooks by concern: hooks_ptr.c (device pointers), hooks_async.c
 * (stream-ordered allocations), hooks_pool.c (where a memory pool lives),
 * poolkept.c (what pools keep), hooks_vmm.c (physical handles and
 * mappings), hooks_array.c (arrays), hooks_ctx.c (what the driver frees
 * with a context).
 */
#ifndef GPUSLICE_CHARGE_H
#define GPUSLICE_CHARGE_H

#include "alloc_granule.h"
#include "gs.h"

struct charge {
	int active;    /* bytes reserved */
	int g;         /* ledger GPU */
	uint64_t n;    /* bytes reserved in the ledger */
	uint64_t kept; /* bytes taken from what pools keep (poolkept.c; pool allocations only) */
};

/* Reserve n bytes on device dev for a charged allocation; a pool's
 * allocation (pool: a constant) takes first from what the pools of its
 * GPU keep (c->kept), and reserves the rest. CUDA_SUCCESS means: call the
 * driver (c->active says whether bytes are held). */
GS_INLINE CUresult charge_dev_as(struct charge *c, int st, int dev, uint64_t n, int pool)
{
	c->active = 0;
	c->kept = 0;
	if (n == 0)
		return CUDA_SUCCESS; /* nothing to charge; the driver answers */
	if (GS_UNLIKELY(st != GS_ST_ACTIVE) && gs_failed_retry() != GS_ST_ACTIVE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int g = gs_dev_to_gpu(dev);
	if (GS_UNLIKELY(g < 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t t = pool ? gs_kept_take(g, n) : 0;
	if (t < n && gs_reserve(g, n - t) < 0) {
		if (pool)
			gs_kept_put(g, t);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->active = 1;
	c->g = g;
	c->n = n - t;
	c->kept = t;
	return CUDA_SUCCESS;
}

GS_INLINE CUresult charge_dev(struct charge *c, int st, int dev, uint64_t n)
{
	return charge_dev_as(c, st, dev, n, 0);
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

/* The pointer table is full: said once (hooks_ptr.c). */
void gs_table_full(void) __attribute__((cold));

/* Take key out of the table: its packed (GPU, bytes), 0 when this process
 * did not charge it. */
static inline uint64_t untrack(int st, uint64_t key)
{
	return st == GS_ST_ACTIVE ? gs_ptr_remove(key) : 0;
}

/* After the real release: give the bytes back (a pool's: kept by the
 * pool, still charged), or keep the entry. */
static inline void released(CUresult r, uint64_t key, uint64_t v)
{
	if (r != CUDA_SUCCESS)
		gs_tab_insert_val(GS_TAB_PTR, key, v);
	else if (GS_UNLIKELY(gs_val_pool(v)))
		gs_kept_put(gs_val_gpu(v), gs_val_bytes(v));
	else
		gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));
}

/*
 * The shapes of the pointer hooks, spelled out once.
 *
 * GS_CHARGED_CREATE_WITH: pass through when inert; otherwise reserve with
 * `reserve` (an expression on `struct charge c` and `st`), call the real
 * entry point and record `key` (evaluated only when it succeeded) with
 * `finish_fn` (-1: no room); when there is no room, `refuse` (an expression
 * that frees *dptr and returns the refusal) is the answer.
 */
#define GS_CHARGED_CREATE_WITH(fn, sym, params, call_args, reserve, finish_fn, key, refuse) \
	CUresult fn params                                                      \
	{                                                                       \
		gs_pfn_##sym real = GS_REAL(sym);                               \
		if (GS_UNLIKELY(real == NULL))                                  \
			return CUDA_ERROR_NOT_INITIALIZED;                      \
		int st = gs_state();                                            \
		if (st == GS_ST_INERT)                                          \
			return real call_args;                                  \
		struct charge c;                                                \
		CUresult r = (reserve);                                         \
		if (r != CUDA_SUCCESS)                                          \
			return r;                                               \
		r = real call_args;                                             \
		if (GS_UNLIKELY(finish_fn(&c, r,                                 \
					  r == CUDA_SUCCESS ? (uint64_t)(key) : 0) < 0)) \
			return (refuse);                                        \
		return r;                                                       \
	}

/*
 * GS_RELEASE: take `key` out of the pointer table, call the real entry point,
 * give the bytes back (or put the entry back when the call failed). Keys
 * this process never charged pass straight through.
 */
#define GS_RELEASE(sym, params, call_args, key) GS_RELEASE_AS(sym, sym, params, call_args, key)
#define GS_RELEASE_AS(fn, sym, params, call_args, key)                          \
	CUresult fn params                                                      \
	{                                                                       \
		gs_pfn_##sym real = GS_REAL(sym);                               \
		if (GS_UNLIKELY(real == NULL))                                  \
			return CUDA_ERROR_NOT_INITIALIZED;                      \
		uint64_t k = (uint64_t)(key);                                   \
		uint64_t v = untrack(gs_state(), k);                            \
		if (v == 0)                                                     \
			return real call_args;                                  \
		CUresult r = real call_args;                                    \
		released(r, k, v);                                              \
		return r;                                                       \
	}

#endif
