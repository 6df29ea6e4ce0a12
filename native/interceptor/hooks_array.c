/*
 * Arrays and mipmapped arrays: charged by their descriptor, remembered with
 * the context they were created in (hooks_ctx.c gives them back when it
 * goes).
 */
#include "charge.h"

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
static CUresult array_created(struct charge *c, CUresult r, int kind, uint64_t key)
{
	if (!c->active)
		return r;
	if (r != CUDA_SUCCESS) {
		driver_refused(c->g, c->n, r);
		return r;
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
	if (gs_xtab_insert(kind, key, gs_val_pack(c->g, c->n), (uint64_t)(uintptr_t)ctx) != NULL)
		return CUDA_SUCCESS;
	/* the table is full: the array is destroyed and refused */
	if (kind == GS_XTAB_ARRAY) {
		gs_pfn_cuArrayDestroy d = GS_REAL(cuArrayDestroy);
		if (d != NULL)
			d((CUarray)(uintptr_t)key);
	} else {
		gs_pfn_cuMipmappedArrayDestroy d = GS_REAL(cuMipmappedArrayDestroy);
		if (d != NULL)
			d((CUmipmappedArray)(uintptr_t)key);
	}
	gs_unreserve(c->g, c->n);
	if (!__atomic_exchange_n(&array_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("array table full: new arrays are refused until some are destroyed");
	return CUDA_ERROR_OUT_OF_MEMORY;
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
			r = array_created(&c, r, kind, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*(out) : 0); \
			if (r != CUDA_SUCCESS && out != NULL)                                       \
				*(out) = NULL;                                                      \
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
