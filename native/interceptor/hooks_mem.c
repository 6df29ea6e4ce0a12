/*
 * Charged allocations and their releases (docs/ledger.md, "Protocol on the
 * hot path"): reserve in the ledger with one CAS, call the real allocator,
 * give the bytes back if it failed, remember pointer -> (bytes, GPU).
 * Release: take the entry out of the table, call the real free, give the
 * bytes back when it succeeded (or put the entry back when it did not).
 * Pointers this process never charged pass through. VMM handles are
 * reference-counted (see the VMM section); stream-ordered allocations are
 * charged to the stream's or the pool's device; arrays remember their
 * context. What the driver frees with a context: hooks_ctx.c.
 */
#include "gs.h"

struct charge {
	int active; /* bytes reserved */
	int g;      /* ledger GPU */
	uint64_t n; /* bytes */
};

static unsigned char table_full_warned;

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

/* Reserve n bytes on the device of stream s. */
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
	return charge_dev(c, GS_ST_ACTIVE, dev, n);
}

/* Reserve n bytes on the device of pool (as recorded when the pool was
 * created or looked up); a pool never seen goes to the stream's device, a
 * pool of host memory is not charged. */
static CUresult charge_pool(struct charge *c, int st, CUmemoryPool pool, CUstream s, uint64_t n)
{
	c->active = 0;
	int where = gs_pool_where((uint64_t)(uintptr_t)pool);
	if (where >= 0)
		return charge_dev(c, st, where, n);
	if (where == GS_POOL_HOST)
		return CUDA_SUCCESS;
	return charge_stream(c, st, s, n);
}

GS_INLINE void finish(struct charge *c, CUresult r, int kind, uint64_t key)
{
	if (!c->active)
		return;
	if (r != CUDA_SUCCESS) {
		gs_unreserve(c->g, c->n);
		return;
	}
	if (GS_UNLIKELY(gs_tab_insert(kind, key, c->g, c->n) < 0) &&
	    !__atomic_exchange_n(&table_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("allocation table full: %llu bytes stay charged until the process exits",
		       (unsigned long long)c->n);
}

/* Take key out of the table: its packed (GPU, bytes), 0 when this process
 * did not charge it. */
static inline uint64_t untrack(int st, int kind, uint64_t key)
{
	return st == GS_ST_ACTIVE ? gs_tab_remove(kind, key) : 0;
}

/* After the real release: give the bytes back, or keep the entry. */
static inline void released(CUresult r, int kind, uint64_t key, uint64_t v)
{
	if (r == CUDA_SUCCESS)
		gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));
	else
		gs_tab_insert(kind, key, gs_val_gpu(v), gs_val_bytes(v));
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/*
 * The two shapes of the pointer hooks, spelled out once.
 *
 * GS_CHARGED_CREATE: pass through when inert; otherwise reserve with `reserve`
 * (an expression on `struct charge c` and `st`), call the real entry point
 * and record `key` (evaluated only when it succeeded) under table `kind`.
 *
 * GS_RELEASE: take `key` out of table `kind`, call the real entry point,
 * give the bytes back (or put the entry back when the call failed). Keys
 * this process never charged pass straight through.
 */
#define GS_CHARGED_CREATE(sym, params, call_args, reserve, kind, key)           \
	CUresult sym params                                                     \
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
		finish(&c, r, kind, r == CUDA_SUCCESS ? (uint64_t)(key) : 0);   \
		return r;                                                       \
	}

#define GS_RELEASE(sym, params, call_args, kind, key)                           \
	CUresult sym params                                                     \
	{                                                                       \
		gs_pfn_##sym real = GS_REAL(sym);                               \
		if (GS_UNLIKELY(real == NULL))                                  \
			return CUDA_ERROR_NOT_INITIALIZED;                      \
		uint64_t k = (uint64_t)(key);                                   \
		uint64_t v = untrack(gs_state(), kind, k);                      \
		if (v == 0)                                                     \
			return real call_args;                                  \
		CUresult r = real call_args;                                    \
		released(r, kind, k, v);                                        \
		return r;                                                       \
	}

/* ---- pointer allocations ---- */

#define GS_CHARGED_PTR_ALLOC(sym, call_args, ...)                                              \
	GS_CHARGED_CREATE(sym, (CUdeviceptr * dptr, size_t bytesize, ##__VA_ARGS__), call_args, \
			  charge_ctx(&c, st, bytesize), GS_TAB_PTR, *dptr)

GS_CHARGED_PTR_ALLOC(cuMemAlloc_v2, (dptr, bytesize))
GS_CHARGED_PTR_ALLOC(cuMemAllocManaged, (dptr, bytesize, flags), unsigned int flags)

/* stream-ordered: the stream's device, or the pool's */
#define GS_CHARGED_ASYNC_ALLOC(sym, call_args, reserve, ...)                                    \
	GS_CHARGED_CREATE(sym, (CUdeviceptr * dptr, size_t bytesize, __VA_ARGS__), call_args, \
			  reserve, GS_TAB_PTR, *dptr)

GS_CHARGED_ASYNC_ALLOC(cuMemAllocAsync, (dptr, bytesize, stream), charge_stream(&c, st, stream, bytesize),
		       CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocAsync_ptsz, (dptr, bytesize, stream), charge_stream(&c, st, stream, bytesize),
		       CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocFromPoolAsync, (dptr, bytesize, pool, stream),
		       charge_pool(&c, st, pool, stream, bytesize), CUmemoryPool pool, CUstream stream)
GS_CHARGED_ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, (dptr, bytesize, pool, stream),
		       charge_pool(&c, st, pool, stream, bytesize), CUmemoryPool pool, CUstream stream)

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
	if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT)
		gs_pool_set((uint64_t)(uintptr_t)*pool, pool_location(poolProps));
	return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	gs_pfn_cuMemPoolDestroy real = GS_REAL(cuMemPoolDestroy);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(pool);
	if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT)
		gs_pool_forget((uint64_t)(uintptr_t)pool);
	return r;
}

#define GS_DEVICE_POOL(sym)                                                           \
	CUresult sym(CUmemoryPool *pool, CUdevice dev)                                \
	{                                                                             \
		gs_pfn_##sym real = GS_REAL(sym);                                     \
		if (GS_UNLIKELY(real == NULL))                                        \
			return CUDA_ERROR_NOT_INITIALIZED;                            \
		CUresult r = real(pool, dev);                                         \
		if (r == CUDA_SUCCESS && gs_state() != GS_ST_INERT)                   \
			gs_pool_set((uint64_t)(uintptr_t)*pool, dev);                 \
		return r;                                                             \
	}

GS_DEVICE_POOL(cuDeviceGetDefaultMemPool)
GS_DEVICE_POOL(cuDeviceGetMemPool)

/* Charged as pitch * height, the size the driver actually handed out:
 * width * height is reserved first, the padding once the pitch is known. */
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
	CUresult r = charge_ctx(&c, st, mul_sat(width, height));
	if (r != CUDA_SUCCESS)
		return r;
	r = real(dptr, pitch, width, height, elemsize);
	if (r == CUDA_SUCCESS && c.active) {
		uint64_t actual = mul_sat(*pitch, height);
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
	finish(&c, r, GS_TAB_PTR, r == CUDA_SUCCESS ? *dptr : 0);
	return r;
}

#define GS_PTR_FREE(sym, call_args, ...) \
	GS_RELEASE(sym, (CUdeviceptr dptr, ##__VA_ARGS__), call_args, GS_TAB_PTR, dptr)

GS_PTR_FREE(cuMemFree_v2, (dptr))
GS_PTR_FREE(cuMemFreeAsync, (dptr, stream), CUstream stream)
GS_PTR_FREE(cuMemFreeAsync_ptsz, (dptr, stream), CUstream stream)

/* ---- virtual memory management ----
 *
 * The physical handle is what costs. Like the driver, the interceptor keeps
 * a reference count per handle it charged: 1 until cuMemRelease, plus one
 * per mapping (cuMemMap) and per cuMemRetainAllocationHandle. The bytes are
 * given back when it drops to 0, i.e. when the handle has been released and
 * is no longer mapped anywhere. Mappings are remembered by address (with
 * their handle and size) so cuMemUnmap / cuMemAddressFree can find the
 * handles of the range they take down.
 */

static unsigned char vmm_full_warned;

static void vmm_table_full(uint64_t bytes)
{
	if (!__atomic_exchange_n(&vmm_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("VMM table full: %llu bytes stay charged until the process exits",
		       (unsigned long long)bytes);
}

/* One more reference on a charged handle; -1 when it has none left. */
static int handle_ref(struct gs_xent *e)
{
	uint64_t r = __atomic_load_n(&e->b, __ATOMIC_ACQUIRE);
	do {
		if (r == 0)
			return -1;
	} while (!__atomic_compare_exchange_n(&e->b, &r, r + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	return 0;
}

/* One reference less; the last one gives the bytes back. */
static void handle_unref(struct gs_xent *e, uint64_t handle)
{
	uint64_t r = __atomic_load_n(&e->b, __ATOMIC_ACQUIRE);
	do {
		if (r == 0)
			return;
	} while (!__atomic_compare_exchange_n(&e->b, &r, r - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	if (r != 1)
		return;
	uint64_t v = __atomic_load_n(&e->a, __ATOMIC_ACQUIRE);
	if (gs_xtab_take(e, handle))
		gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));
}

static void handle_unref_by_key(uint64_t handle)
{
	struct gs_xent *e = gs_xtab_find(GS_XTAB_HANDLE, handle);
	if (e != NULL)
		handle_unref(e, handle);
}

/* After a successful unmap of [lo, lo + size) (gs_map_mu held): forget the
 * mappings recorded in it and drop their handles' references. Mappings laid
 * end to end from lo are followed address by address; anything left of the
 * range after a gap is found by a scan of the table (only then, and only
 * while mappings are recorded). */
static void drop_mappings(uint64_t lo, uint64_t size)
{
	uint64_t hi = size > UINT64_MAX - lo ? UINT64_MAX : lo + size;
	uint64_t cur = lo;
	while (cur < hi && gs_nmapped > 0) {
		struct gs_xent *m = gs_xtab_find(GS_XTAB_MAP, cur);
		if (m == NULL)
			break;
		uint64_t h = __atomic_load_n(&m->a, __ATOMIC_ACQUIRE);
		uint64_t sz = __atomic_load_n(&m->b, __ATOMIC_ACQUIRE);
		if (!gs_xtab_take(m, cur))
			break;
		gs_nmapped--;
		handle_unref_by_key(h);
		cur = sz == 0 || sz > hi - cur ? hi : cur + sz;
	}
	if (cur >= hi || gs_nmapped == 0 || gs_xtabs[GS_XTAB_MAP].e == NULL)
		return;
	struct gs_xtab *t = &gs_xtabs[GS_XTAB_MAP];
	for (uint64_t i = 0; i <= t->mask && gs_nmapped > 0; i++) {
		struct gs_xent *m = &t->e[i];
		uint64_t k = __atomic_load_n(&m->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY || k == GS_KEY_TOMB || k < cur || k >= hi)
			continue;
		uint64_t h = __atomic_load_n(&m->a, __ATOMIC_ACQUIRE);
		if (!gs_xtab_take(m, k))
			continue;
		gs_nmapped--;
		handle_unref_by_key(h);
	}
}

/* After a successful cuMemMap at ptr (gs_map_mu held). A mapping still
 * recorded at ptr is gone (the driver just mapped there; it was taken down
 * without cuMemUnmap): forget it first. -1 when the table is full (the handle
 * then keeps this mapping's reference until the process exits). */
static int map_record(uint64_t ptr, uint64_t handle, uint64_t size)
{
	struct gs_xent *old = gs_xtab_find(GS_XTAB_MAP, ptr);
	if (old != NULL) {
		uint64_t h = __atomic_load_n(&old->a, __ATOMIC_ACQUIRE);
		if (gs_xtab_take(old, ptr)) {
			gs_nmapped--;
			handle_unref_by_key(h);
		}
	}
	if (gs_xtab_insert(GS_XTAB_MAP, ptr, handle, size) == NULL)
		return -1;
	gs_nmapped++;
	return 0;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	gs_pfn_cuMemCreate real = GS_REAL(cuMemCreate);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	struct charge c;
	CUresult r = charge_dev(&c, st, prop->location.id, size);
	if (r != CUDA_SUCCESS)
		return r;
	r = real(handle, size, prop, flags);
	if (!c.active)
		return r;
	if (r != CUDA_SUCCESS) {
		gs_unreserve(c.g, c.n);
		return r;
	}
	if (GS_UNLIKELY(gs_xtab_insert(GS_XTAB_HANDLE, *handle, gs_val_pack(c.g, c.n), 1) == NULL))
		vmm_table_full(c.n);
	return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	gs_pfn_cuMemRelease real = GS_REAL(cuMemRelease);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	struct gs_xent *e = gs_state() == GS_ST_ACTIVE ? gs_xtab_find(GS_XTAB_HANDLE, handle) : NULL;
	CUresult r = real(handle);
	if (e != NULL && r == CUDA_SUCCESS)
		handle_unref(e, handle);
	return r;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	gs_pfn_cuMemRetainAllocationHandle real = GS_REAL(cuMemRetainAllocationHandle);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(handle, addr);
	if (r == CUDA_SUCCESS && gs_state() == GS_ST_ACTIVE) {
		struct gs_xent *e = gs_xtab_find(GS_XTAB_HANDLE, *handle);
		if (e != NULL)
			handle_ref(e);
	}
	return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	gs_pfn_cuMemMap real = GS_REAL(cuMemMap);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	struct gs_xent *e = gs_state() == GS_ST_ACTIVE ? gs_xtab_find(GS_XTAB_HANDLE, handle) : NULL;
	if (e == NULL)
		return real(ptr, size, offset, handle, flags);
	pthread_mutex_lock(&gs_map_mu);
	CUresult r;
	if (handle_ref(e) < 0) {
		r = real(ptr, size, offset, handle, flags); /* released meanwhile: the driver decides */
	} else {
		r = real(ptr, size, offset, handle, flags);
		if (r != CUDA_SUCCESS)
			handle_unref(e, handle);
		else if (map_record(ptr, handle, size) < 0)
			vmm_table_full(gs_val_bytes(__atomic_load_n(&e->a, __ATOMIC_RELAXED)));
	}
	pthread_mutex_unlock(&gs_map_mu);
	return r;
}

#define GS_UNMAP_RANGE(sym)                                                  \
	CUresult sym(CUdeviceptr ptr, size_t size)                           \
	{                                                                    \
		gs_pfn_##sym real = GS_REAL(sym);                            \
		if (GS_UNLIKELY(real == NULL))                               \
			return CUDA_ERROR_NOT_INITIALIZED;                   \
		if (gs_state() != GS_ST_ACTIVE)                              \
			return real(ptr, size);                              \
		pthread_mutex_lock(&gs_map_mu);                              \
		CUresult r = real(ptr, size);                                \
		if (r == CUDA_SUCCESS)                                       \
			drop_mappings(ptr, size);                            \
		pthread_mutex_unlock(&gs_map_mu);                            \
		return r;                                                    \
	}

GS_UNMAP_RANGE(cuMemUnmap)
GS_UNMAP_RANGE(cuMemAddressFree) /* a driver that drops mappings left in the range */

/* ---- arrays: bytes from the descriptor ---- */

/* Bytes per channel element; block-compressed formats count one byte per
 * texel (an upper bound), unknown formats four. */
static uint64_t format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
	case CU_AD_FORMAT_UNORM_INT8X1:
	case CU_AD_FORMAT_SNORM_INT8X1:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
	case CU_AD_FORMAT_UNORM_INT8X2:
	case CU_AD_FORMAT_SNORM_INT8X2:
	case CU_AD_FORMAT_UNORM_INT16X1:
	case CU_AD_FORMAT_SNORM_INT16X1:
	case CU_AD_FORMAT_NV12: /* 1.5 bytes per texel, rounded up */
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
	case CU_AD_FORMAT_UNORM_INT8X4:
	case CU_AD_FORMAT_SNORM_INT8X4:
	case CU_AD_FORMAT_UNORM_INT16X2:
	case CU_AD_FORMAT_SNORM_INT16X2:
		return 4;
	case CU_AD_FORMAT_UNORM_INT16X4:
	case CU_AD_FORMAT_SNORM_INT16X4:
		return 8;
	case CU_AD_FORMAT_BC1_UNORM:
	case CU_AD_FORMAT_BC1_UNORM_SRGB:
	case CU_AD_FORMAT_BC2_UNORM:
	case CU_AD_FORMAT_BC2_UNORM_SRGB:
	case CU_AD_FORMAT_BC3_UNORM:
	case CU_AD_FORMAT_BC3_UNORM_SRGB:
	case CU_AD_FORMAT_BC4_UNORM:
	case CU_AD_FORMAT_BC4_SNORM:
	case CU_AD_FORMAT_BC5_UNORM:
	case CU_AD_FORMAT_BC5_SNORM:
	case CU_AD_FORMAT_BC6H_UF16:
	case CU_AD_FORMAT_BC6H_SF16:
	case CU_AD_FORMAT_BC7_UNORM:
	case CU_AD_FORMAT_BC7_UNORM_SRGB:
		return 1;
	}
	return 4;
}

static uint64_t max1(uint64_t v) { return v ? v : 1; }

/* width x max(h,1) x max(d,1) x channels x element size, summed over mip
 * levels (layers and cube faces do not shrink with the level). */
static uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
	uint64_t texel = mul_sat(format_bytes(d->Format), max1(d->NumChannels));
	int layered = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
	uint64_t total = 0;
	if (levels == 0)
		levels = 1;
	if (levels > 64)
		levels = 64;
	for (unsigned l = 0; l < levels; l++) {
		uint64_t w = max1(d->Width >> l);
		uint64_t h = d->Height ? max1(d->Height >> l) : 1;
		uint64_t z = d->Depth ? (layered ? d->Depth : max1(d->Depth >> l)) : 1;
		total = add_sat(total, mul_sat(mul_sat(mul_sat(w, h), z), texel));
	}
	return d->Width ? total : 0;
}

/* The 3D descriptor of a 2D array: what array_bytes reads. */
static uint64_t array2d_bytes(const CUDA_ARRAY_DESCRIPTOR *desc)
{
	CUDA_ARRAY3D_DESCRIPTOR d3 = {
		.Width = desc->Width,
		.Height = desc->Height,
		.Depth = 0,
		.Format = desc->Format,
		.NumChannels = desc->NumChannels,
		.Flags = 0,
	};
	return array_bytes(&d3, 1);
}

/*
 * The context current at creation is recorded with each array: an array
 * dies with its context, and the context-teardown hooks (hooks_ctx.c) find
 * the arrays of a context by it without asking the driver about handles
 * that may be stale. Every change to the array tables happens under
 * gs_ctx_mu, so a teardown never sees an entry half written.
 */

static unsigned char array_full_warned;

/* After the real create (gs_ctx_mu held): record the array, or give the
 * bytes back when the driver failed. An entry still recorded under the
 * handle the driver just handed out belongs to an array that is gone
 * (taken down with a context the process had no record for): its bytes
 * are given back first. */
static void array_created(struct charge *c, CUresult r, int kind, uint64_t key)
{
	if (!c->active)
		return;
	if (r != CUDA_SUCCESS) {
		gs_unreserve(c->g, c->n);
		return;
	}
	struct gs_xent *old = gs_xtab_find(kind, key);
	if (old != NULL) {
		uint64_t v = __atomic_load_n(&old->a, __ATOMIC_ACQUIRE);
		if (gs_xtab_take(old, key))
			gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));
	}
	gs_pfn_cuCtxGetCurrent getcur = GS_REAL(cuCtxGetCurrent);
	CUcontext ctx = NULL;
	if (getcur == NULL || getcur(&ctx) != CUDA_SUCCESS)
		ctx = NULL;
	if (gs_xtab_insert(kind, key, gs_val_pack(c->g, c->n), (uint64_t)(uintptr_t)ctx) == NULL &&
	    !__atomic_exchange_n(&array_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("array table full: %llu bytes stay charged until the process exits",
		       (unsigned long long)c->n);
}

#define GS_ARRAY_CREATE(sym, params, call_args, out, bytes, kind)                                   \
	CUresult sym params                                                                         \
	{                                                                                           \
		gs_pfn_##sym real = GS_REAL(sym);                                                   \
		if (GS_UNLIKELY(real == NULL))                                                      \
			return CUDA_ERROR_NOT_INITIALIZED;                                          \
		int st = gs_state();                                                                \
		if (st == GS_ST_INERT || desc == NULL)                                              \
			return real call_args;                                                      \
		pthread_mutex_lock(&gs_ctx_mu);                                                     \
		struct charge c;                                                                    \
		CUresult r = charge_ctx(&c, st, (bytes));                                           \
		if (r == CUDA_SUCCESS) {                                                            \
			r = real call_args;                                                         \
			array_created(&c, r, kind, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*(out) : 0); \
		}                                                                                   \
		pthread_mutex_unlock(&gs_ctx_mu);                                                   \
		return r;                                                                           \
	}

/* The bytes come back when the driver destroyed the array. */
#define GS_ARRAY_DESTROY(sym, type, kind)                                        \
	CUresult sym(type h)                                                     \
	{                                                                        \
		gs_pfn_##sym real = GS_REAL(sym);                                \
		if (GS_UNLIKELY(real == NULL))                                   \
			return CUDA_ERROR_NOT_INITIALIZED;                       \
		if (gs_state() != GS_ST_ACTIVE)                                  \
			return real(h);                                          \
		uint64_t key = (uint64_t)(uintptr_t)h;                           \
		pthread_mutex_lock(&gs_ctx_mu);                                  \
		CUresult r = real(h);                                            \
		struct gs_xent *e = r == CUDA_SUCCESS ? gs_xtab_find(kind, key) : NULL; \
		if (e != NULL) {                                                 \
			uint64_t v = __atomic_load_n(&e->a, __ATOMIC_ACQUIRE);   \
			if (gs_xtab_take(e, key))                                \
				gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));    \
		}                                                                \
		pthread_mutex_unlock(&gs_ctx_mu);                                \
		return r;                                                        \
	}

GS_ARRAY_CREATE(cuArrayCreate_v2, (CUarray * array, const CUDA_ARRAY_DESCRIPTOR *desc), (array, desc), array,
		array2d_bytes(desc), GS_XTAB_ARRAY)
GS_ARRAY_CREATE(cuArray3DCreate_v2, (CUarray * array, const CUDA_ARRAY3D_DESCRIPTOR *desc), (array, desc), array,
		array_bytes(desc, 1), GS_XTAB_ARRAY)
GS_ARRAY_CREATE(cuMipmappedArrayCreate,
		(CUmipmappedArray * mipmap, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels),
		(mipmap, desc, levels), mipmap, array_bytes(desc, levels), GS_XTAB_MIPMAP)

GS_ARRAY_DESTROY(cuArrayDestroy, CUarray, GS_XTAB_ARRAY)
GS_ARRAY_DESTROY(cuMipmappedArrayDestroy, CUmipmappedArray, GS_XTAB_MIPMAP)
