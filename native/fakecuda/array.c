/*
 * CUDA arrays and mipmapped arrays: linear, row-major device memory charged
 * like any allocation (element size x channels x width x height x depth).
 * Block-compressed and other packed formats are not modelled.
 */
#include "drv.h"

#include <stdlib.h>
#include <string.h>

struct CUmipmappedArray_st {
	uint32_t magic;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	unsigned levels;
	size_t elem;
	uintptr_t base;
	size_t bytes;
	struct CUarray_st *level; /* levels views */
};

static size_t format_size(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

bool fc_array_valid(CUarray a)
{
	return a != NULL && a->magic == FC_MAGIC_ARRAY;
}

static size_t dim(size_t v)
{
	return v ? v : 1;
}

/* bytes of a W x H x D array of elem-byte elements; 0 on overflow */
static size_t extent(size_t elem, size_t w, size_t h, size_t d)
{
	size_t b = elem;
	if (w > SIZE_MAX / b)
		return 0;
	b *= w;
	if (dim(h) > SIZE_MAX / b)
		return 0;
	b *= dim(h);
	if (dim(d) > SIZE_MAX / b)
		return 0;
	return b * dim(d);
}

static CUresult check_desc(const CUDA_ARRAY3D_DESCRIPTOR *d, size_t *elem)
{
	if (d->Width == 0 || (d->Depth && !d->Height && !(d->Flags & CUDA_ARRAY3D_LAYERED)))
		return CUDA_ERROR_INVALID_VALUE;
	if (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)
		return CUDA_ERROR_INVALID_VALUE;
	size_t f = format_size(d->Format);
	if (f == 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	*elem = f * d->NumChannels;
	return CUDA_SUCCESS;
}

static CUresult create(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	FC_CHECK_INIT();
	CUcontext c = fc_tls_ctx;
	if (!fc_ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (pHandle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	size_t elem;
	CUresult r = check_desc(d, &elem);
	if (r != CUDA_SUCCESS)
		return r;
	size_t bytes = extent(elem, d->Width, d->Height, d->Depth);
	if (bytes == 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct CUarray_st *a = calloc(1, sizeof(*a));
	if (a == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = fc_dev_alloc(c, c->phys, bytes, FC_KIND_ARRAY, NULL, &a->base);
	if (r != CUDA_SUCCESS) {
		free(a);
		return r;
	}
	a->owned = true;
	a->desc = *d;
	a->elem = elem;
	a->rowbytes = d->Width * elem;
	a->bytes = bytes;
	a->magic = FC_MAGIC_ARRAY;
	*pHandle = a;
	return CUDA_SUCCESS;
}

FC_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	if (pAllocateArray == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_ARRAY3D_DESCRIPTOR d = {
		.Width = pAllocateArray->Width,
		.Height = pAllocateArray->Height,
		.Depth = 0,
		.Format = pAllocateArray->Format,
		.NumChannels = pAllocateArray->NumChannels,
		.Flags = 0,
	};
	return create(pHandle, &d);
}

FC_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	if (pAllocateArray == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return create(pHandle, pAllocateArray);
}

FC_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
	FC_CHECK_INIT();
	if (pArrayDescriptor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_array_valid(hArray))
		return CUDA_ERROR_INVALID_HANDLE;
	pArrayDescriptor->Width = hArray->desc.Width;
	pArrayDescriptor->Height = hArray->desc.Height;
	pArrayDescriptor->Format = hArray->desc.Format;
	pArrayDescriptor->NumChannels = hArray->desc.NumChannels;
	return CUDA_SUCCESS;
}

FC_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
	FC_CHECK_INIT();
	if (pArrayDescriptor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_array_valid(hArray))
		return CUDA_ERROR_INVALID_HANDLE;
	*pArrayDescriptor = hArray->desc;
	return CUDA_SUCCESS;
}

FC_API CUresult cuArrayDestroy(CUarray hArray)
{
	FC_CHECK_INIT();
	if (!fc_array_valid(hArray) || !hArray->owned)
		return CUDA_ERROR_INVALID_HANDLE;
	hArray->magic = FC_MAGIC_DEAD;
	CUresult r = fc_dev_free(hArray->base, FC_KMASK(FC_KIND_ARRAY), NULL);
	free(hArray);
	/* the context may already have taken the memory with it */
	return r == CUDA_SUCCESS ? r : CUDA_SUCCESS;
}

FC_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
				       unsigned int numMipmapLevels)
{
	FC_CHECK_INIT();
	CUcontext c = fc_tls_ctx;
	if (!fc_ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (pHandle == NULL || pMipmappedArrayDesc == NULL || numMipmapLevels == 0 || numMipmapLevels > 32)
		return CUDA_ERROR_INVALID_VALUE;
	const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
	size_t elem;
	CUresult r = check_desc(d, &elem);
	if (r != CUDA_SUCCESS)
		return r;
	struct CUmipmappedArray_st *m = calloc(1, sizeof(*m));
	struct CUarray_st *lv = calloc(numMipmapLevels, sizeof(*lv));
	if (m == NULL || lv == NULL) {
		free(m);
		free(lv);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t total = 0;
	for (unsigned l = 0; l < numMipmapLevels; l++) {
		CUDA_ARRAY3D_DESCRIPTOR ld = *d;
		ld.Width = dim(d->Width >> l);
		ld.Height = d->Height ? dim(d->Height >> l) : 0;
		ld.Depth = d->Depth && !(d->Flags & CUDA_ARRAY3D_LAYERED) ? dim(d->Depth >> l) : d->Depth;
		size_t b = extent(elem, ld.Width, ld.Height, ld.Depth);
		if (b == 0 || total > SIZE_MAX - b) {
			free(m);
			free(lv);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		lv[l].desc = ld;
		lv[l].elem = elem;
		lv[l].rowbytes = ld.Width * elem;
		lv[l].bytes = b;
		lv[l].base = total; /* offset for now */
		total += b;
	}
	r = fc_dev_alloc(c, c->phys, total, FC_KIND_ARRAY, NULL, &m->base);
	if (r != CUDA_SUCCESS) {
		free(m);
		free(lv);
		return r;
	}
	for (unsigned l = 0; l < numMipmapLevels; l++) {
		lv[l].base += m->base;
		lv[l].owned = false;
		lv[l].magic = FC_MAGIC_ARRAY;
	}
	m->desc = *d;
	m->levels = numMipmapLevels;
	m->elem = elem;
	m->bytes = total;
	m->level = lv;
	m->magic = FC_MAGIC_MIP;
	*pHandle = m;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level)
{
	FC_CHECK_INIT();
	if (pLevelArray == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (hMipmappedArray == NULL || hMipmappedArray->magic != FC_MAGIC_MIP)
		return CUDA_ERROR_INVALID_HANDLE;
	if (level >= hMipmappedArray->levels)
		return CUDA_ERROR_INVALID_VALUE;
	*pLevelArray = &hMipmappedArray->level[level];
	return CUDA_SUCCESS;
}

FC_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	FC_CHECK_INIT();
	if (hMipmappedArray == NULL || hMipmappedArray->magic != FC_MAGIC_MIP)
		return CUDA_ERROR_INVALID_HANDLE;
	hMipmappedArray->magic = FC_MAGIC_DEAD;
	for (unsigned l = 0; l < hMipmappedArray->levels; l++)
		hMipmappedArray->level[l].magic = FC_MAGIC_DEAD;
	(void)fc_dev_free(hMipmappedArray->base, FC_KMASK(FC_KIND_ARRAY), NULL);
	/* level views and the handle stay allocated: stale level handles must read as dead */
	return CUDA_SUCCESS;
}
