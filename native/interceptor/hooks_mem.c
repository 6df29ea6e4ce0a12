/*
 * Charged allocations and their releases (docs/ledger.md, "Protocol on the
 * hot path"): reserve in the ledger with one CAS, call the real allocator,
 * give the bytes back if it failed, remember pointer -> (bytes, GPU).
 * Release: take the entry out of the table, call the real free, give the
 * bytes back when it succeeded (or put the entry back when it did not).
 * Pointers this process never charged pass through.
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
 * The two shapes every hook here has, spelled out once.
 *
 * GS_CHARGED_CREATE: pass through when inert (or when `bypass` holds, for
 * requests that cost no device memory); otherwise reserve with `reserve`
 * (an expression on `struct charge c` and `st`), call the real entry point
 * and record `key` (evaluated only when it succeeded) under table `kind`.
 *
 * GS_RELEASE: take `key` out of table `kind`, call the real entry point,
 * give the bytes back (or put the entry back when the call failed). Keys
 * this process never charged pass straight through.
 */
#define GS_CHARGED_CREATE(sym, params, call_args, bypass, reserve, kind, key)   \
	CUresult sym params                                                     \
	{                                                                       \
		gs_pfn_##sym real = GS_REAL(sym);                               \
		if (GS_UNLIKELY(real == NULL))                                  \
			return CUDA_ERROR_NOT_INITIALIZED;                      \
		int st = gs_state();                                            \
		if (st == GS_ST_INERT || (bypass))                              \
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
	GS_CHARGED_CREATE(sym, (CUdeviceptr * dptr, size_t bytesize, ##__VA_ARGS__), call_args, 0, \
			  charge_ctx(&c, st, bytesize), GS_TAB_PTR, *dptr)

GS_CHARGED_PTR_ALLOC(cuMemAlloc_v2, (dptr, bytesize))
GS_CHARGED_PTR_ALLOC(cuMemAllocManaged, (dptr, bytesize, flags), unsigned int flags)
GS_CHARGED_PTR_ALLOC(cuMemAllocAsync, (dptr, bytesize, stream), CUstream stream)
GS_CHARGED_PTR_ALLOC(cuMemAllocAsync_ptsz, (dptr, bytesize, stream), CUstream stream)
GS_CHARGED_PTR_ALLOC(cuMemAllocFromPoolAsync, (dptr, bytesize, pool, stream), CUmemoryPool pool,
		     CUstream stream)
GS_CHARGED_PTR_ALLOC(cuMemAllocFromPoolAsync_ptsz, (dptr, bytesize, pool, stream),
		     CUmemoryPool pool, CUstream stream)

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

/* ---- virtual memory management: the physical handle is what costs ---- */

GS_CHARGED_CREATE(cuMemCreate,
		  (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,
		   unsigned long long flags),
		  (handle, size, prop, flags), prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE,
		  charge_dev(&c, st, prop->location.id, size), GS_TAB_VMM, *handle)

GS_RELEASE(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle), GS_TAB_VMM, handle)

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

GS_CHARGED_CREATE(cuArrayCreate_v2, (CUarray * array, const CUDA_ARRAY_DESCRIPTOR *desc), (array, desc), desc == NULL,
		  charge_ctx(&c, st, array2d_bytes(desc)), GS_TAB_ARRAY, (uintptr_t)*array)

GS_CHARGED_CREATE(cuArray3DCreate_v2, (CUarray * array, const CUDA_ARRAY3D_DESCRIPTOR *desc), (array, desc),
		  desc == NULL, charge_ctx(&c, st, array_bytes(desc, 1)), GS_TAB_ARRAY, (uintptr_t)*array)

GS_CHARGED_CREATE(cuMipmappedArrayCreate,
		  (CUmipmappedArray * mipmap, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels),
		  (mipmap, desc, levels), desc == NULL, charge_ctx(&c, st, array_bytes(desc, levels)), GS_TAB_MIPMAP,
		  (uintptr_t)*mipmap)

GS_RELEASE(cuArrayDestroy, (CUarray array), (array), GS_TAB_ARRAY, (uintptr_t)array)

GS_RELEASE(cuMipmappedArrayDestroy, (CUmipmappedArray mipmap), (mipmap), GS_TAB_MIPMAP, (uintptr_t)mipmap)
