/*
 * Device pointers: cuMemAlloc, cuMemAllocManaged, cuMemAllocPitch and their
 * releases (charge.h has the protocol). Stream-ordered allocations:
 * hooks_async.c. What the driver frees with a context: hooks_ctx.c.
 * cuMemAlloc and cuMemAllocPitch are charged what the driver takes for
 * them (alloc_granule.h: above 1 MiB, a multiple of 2 MiB), recorded
 * with the pointer and given back by its release.
 */
#include "charge.h"

static unsigned char table_full_warned;

void gs_table_full(void)
{
	if (!__atomic_exchange_n(&table_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("allocation table full: allocations are refused until some are freed");
}

/* After the real allocator: give the bytes back when it failed, else
 * record key. -1 when the table is full: the caller frees the allocation
 * and refuses it (the table fails closed: memory the process holds is never
 * left uncounted, nor its release lost). */
GS_INLINE int finish(struct charge *c, CUresult r, uint64_t key)
{
	if (!c->active)
		return 0;
	if (r != CUDA_SUCCESS) {
		driver_refused(c->g, c->n, r);
		return 0;
	}
	if (GS_LIKELY(gs_ptr_insert(key, c->g, c->n) == 0))
		return 0;
	return -1;
}

/* The allocation could not be recorded: free it (undo is the real free),
 * give the bytes back, refuse. */
static __attribute__((noinline, cold)) CUresult refuse_unrecorded(struct charge *c, CUdeviceptr *dptr)
{
	gs_unreserve(c->g, c->n);
	gs_table_full();
	*dptr = 0;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* GS_CHARGED_CREATE (charge.h's GS_CHARGED_CREATE_WITH): recorded in the
 * pointer table (finish); when it is full, `undo` (the real free of *dptr)
 * runs and the allocation is refused. */
#define GS_CHARGED_CREATE(sym, params, call_args, reserve, key, undo) \
	GS_CHARGED_CREATE_AS(sym, sym, params, call_args, reserve, key, undo)
#define GS_CHARGED_CREATE_AS(fn, sym, params, call_args, reserve, key, undo)                   \
	GS_CHARGED_CREATE_WITH(fn, sym, params, call_args, reserve, finish, key, \
			       (undo, refuse_unrecorded(&c, dptr)))

/* ---- pointer allocations ---- */

#define GS_CHARGED_PTR_ALLOC(sym, call_args, ...)                                              \
	GS_CHARGED_CREATE(sym, (CUdeviceptr * dptr, size_t bytesize, ##__VA_ARGS__), call_args, \
			  charge_ctx(&c, st, bytesize), *dptr, undo_free(*dptr))

static __attribute__((noinline, cold)) void undo_free(CUdeviceptr p)
{
	gs_pfn_cuMemFree_v2 fr = GS_REAL(cuMemFree_v2);
	if (fr != NULL)
		fr(p);
}

/* cuMemAlloc_v2 and cuMemFree_v2: their common case at the end of this
 * file, which falls back to these. */
static __attribute__((noinline)) GS_CHARGED_CREATE_AS(alloc_general, cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize), (dptr, bytesize),
			    charge_ctx(&c, st, gs_alloc_rounded(bytesize)), *dptr, undo_free(*dptr))
GS_CHARGED_PTR_ALLOC(cuMemAllocManaged, (dptr, bytesize, flags), unsigned int flags)

/* Charged as pitch * height, the size the driver actually handed out,
 * rounded as it takes it on the device: width * height is reserved first,
 * the rest once the pitch is known. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
			    unsigned int elemsize)
{
	gs_pfn_cuMemAllocPitch_v2 real = GS_REAL(cuMemAllocPitch_v2);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT)
		return real(dptr, pitch, width, height, elemsize);
	struct charge c;
	CUresult r = charge_ctx(&c, st, gs_alloc_rounded(mul_sat(width, height)));
	if (r != CUDA_SUCCESS)
		return r;
	r = real(dptr, pitch, width, height, elemsize);
	if (r == CUDA_SUCCESS && c.active) {
		uint64_t actual = gs_alloc_rounded(mul_sat(*pitch, height));
		if (actual > c.n) {
			if (gs_reserve(c.g, actual - c.n) < 0) {
				gs_pfn_cuMemFree_v2 fr = GS_REAL(cuMemFree_v2);
				if (fr != NULL)
					fr(*dptr);
				gs_unreserve(c.g, c.n);
				*dptr = 0;
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
		} else if (actual < c.n) {
			gs_unreserve(c.g, c.n - actual);
		}
		c.n = actual;
	}
	if (GS_UNLIKELY(finish(&c, r, r == CUDA_SUCCESS ? *dptr : 0) < 0)) {
		undo_free(*dptr);
		return refuse_unrecorded(&c, dptr);
	}
	return r;
}

static __attribute__((noinline)) GS_RELEASE_AS(free_general, cuMemFree_v2, (CUdeviceptr dptr), (dptr), dptr)

/*
 * cuMemAlloc_v2 and cuMemFree_v2, the calls caching allocators make by the
 * million: the common case spelled out (docs/interceptor-internals.md "Cost"). An
 * attached thread with its own ledger stripe and front, whose credit
 * covers the allocation, pays plain loads and stores on lines only it
 * writes; anything else goes to the general hooks above before changing
 * anything. No stack protector here: no array or buffer lives in these
 * frames, and the canary would be a fifth of what they add.
 */
/* After the fast path's real cuMemAlloc_v2 failed: give the credit back. */
static __attribute__((noinline, cold)) CUresult alloc_failed(long g, uint64_t n, CUresult r)
{
	driver_refused((int)g, n, r);
	return r;
}

/* The allocation did not fit this thread's front: the shared table, or
 * free it and refuse when that is full too. */
static __attribute__((noinline)) CUresult alloc_record(CUdeviceptr *dptr, long g, uint64_t n)
{
	struct charge c = {.active = 1, .g = (int)g, .n = n};
	if (GS_LIKELY(finish(&c, CUDA_SUCCESS, *dptr) == 0))
		return CUDA_SUCCESS;
	undo_free(*dptr);
	return refuse_unrecorded(&c, dptr);
}

/* The fast path's release, when the bytes would leave this thread more
 * credit than its cap: the real free, then the slow give-back (the excess
 * to used), or the entry back when the free failed. */
static __attribute__((noinline)) CUresult free_release(CUdeviceptr dptr, long g, uint64_t n)
{
	CUresult r = gs_hot_free(dptr);
	if (r == CUDA_SUCCESS)
		gs_unreserve_slow((int)g, n);
	else
		released(r, dptr, gs_val_pack((int)g, n));
	return r;
}

/* The fast path's real cuMemFree_v2 failed after this thread's held[g]
 * (at held, which still reads h + n) was to become h: the entry goes
 * back, nothing is given back. */
static __attribute__((noinline, cold)) CUresult free_failed(CUresult r, CUdeviceptr dptr, const uint64_t *held,
							   uint64_t h)
{
	long g = held - gs_tls.st->held;
	released(r, dptr, gs_val_pack((int)g, __atomic_load_n(held, __ATOMIC_RELAXED) - h));
	return r;
}

/* The common case's device is not the thread's last one: the ledger GPU
 * of the current device (asked again: the answer cannot have changed on
 * this thread meanwhile), remembered as the thread's last one; -1 when the
 * general hook must decide (an ordinal out of range, not known yet, or not
 * of the session). */
static __attribute__((noinline)) long dev_gpu(void)
{
	CUdevice dev;
	if (gs_hot_getdev(&dev) != CUDA_SUCCESS || (unsigned)dev >= GS_MAX_ORDINALS)
		return -1;
	int g = __atomic_load_n(&gs.devmap[dev], __ATOMIC_RELAXED);
	if (g < 0)
		return -1;
	gs_tls.dev_last = (uint32_t)dev;
	gs_tls.dev_gpu = g;
	return g;
}

__attribute__((no_stack_protector)) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	/* gs_tls.hot (an owned stripe and front) implies the state is ACTIVE
	 * (only an attach's threads claim them, and fork, the only way out,
	 * drops them: attach.c) and the real cuMemAlloc_v2 and cuCtxGetDevice
	 * known (gs_own_slow). The charge n is bytesize as the driver takes
	 * it (alloc_granule.h). No check of n: the credit that covers it is
	 * at most an eighth of the limit (far below GS_VAL_BYTES_MASK), and
	 * 0 bytes, charged and recorded as 0, give back 0. */
	if (GS_UNLIKELY(gs_tls.hot == NULL))
		return alloc_general(dptr, bytesize);
	CUdevice dev;
	if (GS_UNLIKELY(gs_hot_getdev(&dev) != CUDA_SUCCESS))
		return alloc_general(dptr, bytesize);
	long g = gs_tls.dev_gpu;
	if (GS_UNLIKELY((uint32_t)dev != gs_tls.dev_last) && GS_UNLIKELY((g = dev_gpu()) < 0))
		return alloc_general(dptr, bytesize);
#if defined(__x86_64__)
	/* bytesize in the register it is passed in, to the driver or the
	 * general hook: n takes its saved register across the call, not one
	 * more (a push and a pop) */
	__asm__("" : "+S"(bytesize));
#endif
	uint64_t n = gs_alloc_rounded(bytesize);
	if (GS_UNLIKELY(!gs_credit_spend(gs_tls.hot, g, n)))
		return alloc_general(dptr, bytesize);
	CUresult r = gs_hot_alloc(dptr, bytesize);
	/* g again from where it was taken (dev_gpu sets it too): one load
	 * instead of a register kept across the call */
	g = gs_tls.dev_gpu;
	if (GS_UNLIKELY(r != CUDA_SUCCESS))
		return alloc_failed(g, n, r);
	uint64_t key = *dptr;
	if (GS_LIKELY(gs_key_ok(key)) && GS_LIKELY(gs_front_store(gs_tls.fr, key, g, n)))
		return CUDA_SUCCESS;
	return alloc_record(dptr, g, n);
}

__attribute__((no_stack_protector)) CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	/* gs_tls.hot implies the state is ACTIVE, a front of this thread's
	 * and the real cuMemFree_v2 known (front.c) */
	struct gs_slot_stripe *s = gs_tls.hot;
	struct gs_fent *e;
	if (GS_UNLIKELY(s == NULL) || GS_UNLIKELY(!gs_key_ok(dptr)) ||
	    GS_UNLIKELY(!gs_front_take_ent(gs_tls.fr, dptr, &e)))
		return free_general(dptr);
	uint64_t n = __atomic_load_n(&e->bytes, __ATOMIC_RELAXED);
	long g = (long)__atomic_load_n(&e->gpu, __ATOMIC_RELAXED);
	/* what this thread's held[g] becomes, worked out before the driver
	 * call (only this thread writes it: gs_credit_keep), stored after */
	uint64_t *held = &s->held[g], h;
	if (GS_UNLIKELY(!gs_credit_keep_check(s, g, n, &h)))
		return free_release(dptr, g, n);
	CUresult r = gs_hot_free(dptr);
	if (GS_UNLIKELY(r != CUDA_SUCCESS))
		return free_failed(r, dptr, held, h);
	__atomic_store_n(held, h, __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}
