/*
 * Copies and memsets. Device memory is host-addressable here (unified
 * addressing), so every copy is a real memcpy; the stream-ordered variants
 * complete before they return. Arrays are linear, row-major memory.
 */
#include "drv.h"

#include <string.h>

static CUresult check_stream(CUstream s)
{
	CUresult err = CUDA_SUCCESS;
	if (fc_stream_ctx(s, &err) == NULL)
		return err;
	return CUDA_SUCCESS;
}

#define CHECK_PTR(p)                                   \
	do {                                           \
		if ((p) == 0)                          \
			return CUDA_ERROR_INVALID_VALUE; \
	} while (0)

static CUresult copy_bytes(void *dst, const void *src, size_t n)
{
	if (n == 0)
		return CUDA_SUCCESS;
	if (dst == NULL || src == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	memmove(dst, src, n);
	return CUDA_SUCCESS;
}

static CUresult array_span(CUarray a, size_t off, size_t n, char **out)
{
	if (!fc_array_valid(a))
		return CUDA_ERROR_INVALID_VALUE;
	if (off > a->bytes || n > a->bytes - off)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (char *)a->base + off;
	return CUDA_SUCCESS;
}

/* ---- synchronous 1D ---- */
FC_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	FC_CHECK_INIT();
	return copy_bytes((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
}

FC_API CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
			     size_t ByteCount)
{
	FC_CHECK_INIT();
	if (!fc_ctx_valid(dstContext) || !fc_ctx_valid(srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy_bytes((void *)(uintptr_t)dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount);
}

FC_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	FC_CHECK_INIT();
	return copy_bytes((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
}

FC_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	FC_CHECK_INIT();
	return copy_bytes(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
}

FC_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	FC_CHECK_INIT();
	return copy_bytes((void *)(uintptr_t)dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount);
}

FC_API CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{
	FC_CHECK_INIT();
	char *d;
	CUresult r = array_span(dstArray, dstOffset, ByteCount, &d);
	return r ? r : copy_bytes(d, (const void *)(uintptr_t)srcDevice, ByteCount);
}

FC_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	FC_CHECK_INIT();
	char *s;
	CUresult r = array_span(srcArray, srcOffset, ByteCount, &s);
	return r ? r : copy_bytes((void *)(uintptr_t)dstDevice, s, ByteCount);
}

FC_API CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{
	FC_CHECK_INIT();
	char *d;
	CUresult r = array_span(dstArray, dstOffset, ByteCount, &d);
	return r ? r : copy_bytes(d, srcHost, ByteCount);
}

FC_API CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	FC_CHECK_INIT();
	char *s;
	CUresult r = array_span(srcArray, srcOffset, ByteCount, &s);
	return r ? r : copy_bytes(dstHost, s, ByteCount);
}

FC_API CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
				size_t ByteCount)
{
	FC_CHECK_INIT();
	char *d, *s;
	CUresult r = array_span(dstArray, dstOffset, ByteCount, &d);
	if (r == CUDA_SUCCESS)
		r = array_span(srcArray, srcOffset, ByteCount, &s);
	return r ? r : copy_bytes(d, s, ByteCount);
}

/* ---- 2D / 3D ---- */
struct side {
	char *base;
	size_t pitch;
	size_t height; /* rows per slice (3D) */
};

static CUresult resolve_side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch,
			     size_t height, struct side *out)
{
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		out->base = (char *)host;
		break;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		out->base = (char *)(uintptr_t)dev;
		break;
	case CU_MEMORYTYPE_ARRAY:
		if (!fc_array_valid(arr))
			return CUDA_ERROR_INVALID_VALUE;
		out->base = (char *)arr->base;
		out->pitch = arr->rowbytes;
		out->height = arr->desc.Height ? arr->desc.Height : 1;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (out->base == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	out->pitch = pitch;
	out->height = height;
	return CUDA_SUCCESS;
}

static CUresult copy3d(const struct side *s, size_t sx, size_t sy, size_t sz, const struct side *d, size_t dx,
		       size_t dy, size_t dz, size_t width, size_t height, size_t depth)
{
	if (width == 0 || height == 0 || depth == 0)
		return CUDA_SUCCESS;
	if ((height > 1 || depth > 1) && (s->pitch < width + sx || d->pitch < width + dx))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t z = 0; z < depth; z++)
		for (size_t y = 0; y < height; y++) {
			const char *src = s->base + ((sz + z) * s->height + sy + y) * s->pitch + sx;
			char *dst = d->base + ((dz + z) * d->height + dy + y) * d->pitch + dx;
			memmove(dst, src, width);
		}
	return CUDA_SUCCESS;
}

static CUresult do_copy2d(const CUDA_MEMCPY2D *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct side s, d;
	CUresult r = resolve_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, 0, &s);
	if (r == CUDA_SUCCESS)
		r = resolve_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, 0, &d);
	if (r != CUDA_SUCCESS)
		return r;
	s.height = d.height = 0;
	return copy3d(&s, p->srcXInBytes, p->srcY, 0, &d, p->dstXInBytes, p->dstY, 0, p->WidthInBytes, p->Height, 1);
}

static CUresult do_copy3d(const CUDA_MEMCPY3D *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct side s, d;
	CUresult r = resolve_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->srcHeight,
				  &s);
	if (r == CUDA_SUCCESS)
		r = resolve_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->dstHeight, &d);
	if (r != CUDA_SUCCESS)
		return r;
	if (p->Depth > 1 && (s.height < p->Height + p->srcY || d.height < p->Height + p->dstY))
		return CUDA_ERROR_INVALID_VALUE;
	return copy3d(&s, p->srcXInBytes, p->srcY, p->srcZ, &d, p->dstXInBytes, p->dstY, p->dstZ, p->WidthInBytes,
		      p->Height, p->Depth);
}

FC_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	FC_CHECK_INIT();
	return do_copy2d(pCopy);
}

FC_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
	FC_CHECK_INIT();
	return do_copy2d(pCopy);
}

FC_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
	FC_CHECK_INIT();
	return do_copy3d(pCopy);
}

/* ---- memset ---- */
static CUresult set2d(CUdeviceptr dst, size_t pitch, const void *val, size_t esize, size_t width, size_t height)
{
	if (dst == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (height > 1 && pitch < width * esize)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t y = 0; y < height; y++) {
		char *row = (char *)(uintptr_t)dst + y * pitch;
		if (esize == 1) {
			memset(row, *(const unsigned char *)val, width);
		} else if (esize == 2) {
			unsigned short v = *(const unsigned short *)val;
			for (size_t i = 0; i < width; i++)
				memcpy(row + 2 * i, &v, 2);
		} else {
			unsigned int v = *(const unsigned int *)val;
			for (size_t i = 0; i < width; i++)
				memcpy(row + 4 * i, &v, 4);
		}
	}
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	FC_CHECK_INIT();
	return N ? set2d(dstDevice, N, &uc, 1, N, 1) : CUDA_SUCCESS;
}

FC_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	FC_CHECK_INIT();
	if (dstDevice % 2)
		return CUDA_ERROR_INVALID_VALUE;
	return N ? set2d(dstDevice, 2 * N, &us, 2, N, 1) : CUDA_SUCCESS;
}

FC_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	FC_CHECK_INIT();
	if (dstDevice % 4)
		return CUDA_ERROR_INVALID_VALUE;
	return N ? set2d(dstDevice, 4 * N, &ui, 4, N, 1) : CUDA_SUCCESS;
}

FC_API CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height)
{
	FC_CHECK_INIT();
	return set2d(dstDevice, dstPitch, &uc, 1, Width, Height);
}

FC_API CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
				 size_t Height)
{
	FC_CHECK_INIT();
	return set2d(dstDevice, dstPitch, &us, 2, Width, Height);
}

FC_API CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
				 size_t Height)
{
	FC_CHECK_INIT();
	return set2d(dstDevice, dstPitch, &ui, 4, Width, Height);
}

/* ---- stream-ordered variants: validate the stream, then do the work now ---- */
#define ASYNC(call)                                        \
	do {                                               \
		FC_CHECK_INIT();                           \
		CUresult r_ = check_stream(hStream);       \
		if (r_ != CUDA_SUCCESS)                    \
			return r_;                         \
		return call;                               \
	} while (0)

FC_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	ASYNC(cuMemcpy(dst, src, ByteCount));
}
FC_API CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
				  CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
	ASYNC(cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount));
}
FC_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
	ASYNC(cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount));
}
FC_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	ASYNC(cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount));
}
FC_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
				     CUstream hStream)
{
	ASYNC(cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount));
}
FC_API CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
				     CUstream hStream)
{
	ASYNC(cuMemcpyHtoA_v2(dstArray, dstOffset, srcHost, ByteCount));
}
FC_API CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
				     CUstream hStream)
{
	ASYNC(cuMemcpyAtoH_v2(dstHost, srcArray, srcOffset, ByteCount));
}
FC_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	ASYNC(do_copy2d(pCopy));
}
FC_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	ASYNC(do_copy3d(pCopy));
}
FC_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	ASYNC(cuMemsetD8_v2(dstDevice, uc, N));
}
FC_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
	ASYNC(cuMemsetD16_v2(dstDevice, us, N));
}
FC_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	ASYNC(cuMemsetD32_v2(dstDevice, ui, N));
}
FC_API CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
				  size_t Height, CUstream hStream)
{
	ASYNC(cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height));
}
FC_API CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
				   size_t Height, CUstream hStream)
{
	ASYNC(cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height));
}
FC_API CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
				   size_t Height, CUstream hStream)
{
	ASYNC(cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height));
}

/* ---- per-thread default stream symbols (same behaviour, distinct entry points) ---- */
FC_PT_WRAP(CUresult, cuMemcpy, _ptds, (CUdeviceptr a, CUdeviceptr b, size_t n), (a, b, n))
FC_PT_WRAP(CUresult, cuMemcpyPeer, _ptds, (CUdeviceptr a, CUcontext b, CUdeviceptr c, CUcontext d, size_t n),
	   (a, b, c, d, n))
FC_PT_WRAP(CUresult, cuMemcpyHtoD_v2, _ptds, (CUdeviceptr a, const void *b, size_t n), (a, b, n))
FC_PT_WRAP(CUresult, cuMemcpyDtoH_v2, _ptds, (void *a, CUdeviceptr b, size_t n), (a, b, n))
FC_PT_WRAP(CUresult, cuMemcpyDtoD_v2, _ptds, (CUdeviceptr a, CUdeviceptr b, size_t n), (a, b, n))
FC_PT_WRAP(CUresult, cuMemcpyDtoA_v2, _ptds, (CUarray a, size_t o, CUdeviceptr b, size_t n), (a, o, b, n))
FC_PT_WRAP(CUresult, cuMemcpyAtoD_v2, _ptds, (CUdeviceptr a, CUarray b, size_t o, size_t n), (a, b, o, n))
FC_PT_WRAP(CUresult, cuMemcpyHtoA_v2, _ptds, (CUarray a, size_t o, const void *b, size_t n), (a, o, b, n))
FC_PT_WRAP(CUresult, cuMemcpyAtoH_v2, _ptds, (void *a, CUarray b, size_t o, size_t n), (a, b, o, n))
FC_PT_WRAP(CUresult, cuMemcpyAtoA_v2, _ptds, (CUarray a, size_t o, CUarray b, size_t p, size_t n),
	   (a, o, b, p, n))
FC_PT_WRAP(CUresult, cuMemcpy2D_v2, _ptds, (const CUDA_MEMCPY2D *p), (p))
FC_PT_WRAP(CUresult, cuMemcpy2DUnaligned_v2, _ptds, (const CUDA_MEMCPY2D *p), (p))
FC_PT_WRAP(CUresult, cuMemcpy3D_v2, _ptds, (const CUDA_MEMCPY3D *p), (p))
FC_PT_WRAP(CUresult, cuMemsetD8_v2, _ptds, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))
FC_PT_WRAP(CUresult, cuMemsetD16_v2, _ptds, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))
FC_PT_WRAP(CUresult, cuMemsetD32_v2, _ptds, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))
FC_PT_WRAP(CUresult, cuMemsetD2D8_v2, _ptds, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h),
	   (d, p, v, w, h))
FC_PT_WRAP(CUresult, cuMemsetD2D16_v2, _ptds, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h),
	   (d, p, v, w, h))
FC_PT_WRAP(CUresult, cuMemsetD2D32_v2, _ptds, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h),
	   (d, p, v, w, h))
FC_PT_WRAP(CUresult, cuMemcpyAsync, _ptsz, (CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s), (a, b, n, s))
FC_PT_WRAP(CUresult, cuMemcpyPeerAsync, _ptsz,
	   (CUdeviceptr a, CUcontext b, CUdeviceptr c, CUcontext d, size_t n, CUstream s), (a, b, c, d, n, s))
FC_PT_WRAP(CUresult, cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr a, const void *b, size_t n, CUstream s),
	   (a, b, n, s))
FC_PT_WRAP(CUresult, cuMemcpyDtoHAsync_v2, _ptsz, (void *a, CUdeviceptr b, size_t n, CUstream s), (a, b, n, s))
FC_PT_WRAP(CUresult, cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s),
	   (a, b, n, s))
FC_PT_WRAP(CUresult, cuMemcpyHtoAAsync_v2, _ptsz, (CUarray a, size_t o, const void *b, size_t n, CUstream s),
	   (a, o, b, n, s))
FC_PT_WRAP(CUresult, cuMemcpyAtoHAsync_v2, _ptsz, (void *a, CUarray b, size_t o, size_t n, CUstream s),
	   (a, b, o, n, s))
FC_PT_WRAP(CUresult, cuMemcpy2DAsync_v2, _ptsz, (const CUDA_MEMCPY2D *p, CUstream s), (p, s))
FC_PT_WRAP(CUresult, cuMemcpy3DAsync_v2, _ptsz, (const CUDA_MEMCPY3D *p, CUstream s), (p, s))
FC_PT_WRAP(CUresult, cuMemsetD8Async, _ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))
FC_PT_WRAP(CUresult, cuMemsetD16Async, _ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
	   (d, v, n, s))
FC_PT_WRAP(CUresult, cuMemsetD32Async, _ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream s),
	   (d, v, n, s))
FC_PT_WRAP(CUresult, cuMemsetD2D8Async, _ptsz,
	   (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s), (d, p, v, w, h, s))
FC_PT_WRAP(CUresult, cuMemsetD2D16Async, _ptsz,
	   (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s), (d, p, v, w, h, s))
FC_PT_WRAP(CUresult, cuMemsetD2D32Async, _ptsz,
	   (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s), (d, p, v, w, h, s))
