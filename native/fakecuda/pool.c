/*
 * Stream-ordered allocation and memory pools. Each device has a default pool;
 * cuMemPoolCreate makes more. Allocations are charged at once and freed
 * memory goes straight back to the device (the pool keeps no reserve), so a
 * release threshold is recorded but has nothing to hold.
 */
#include "drv.h"

#include <stdlib.h>
#include <string.h>

static struct CUmemPoolHandle_st default_pool[FC_MAX_DEVICES];
static CUmemoryPool current_pool[FC_MAX_DEVICES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void pool_init(struct CUmemPoolHandle_st *p, int ordinal, const CUmemPoolProps *props, bool dflt)
{
	memset(p, 0, sizeof(*p));
	p->ordinal = ordinal;
	p->phys = fc_visible[ordinal];
	p->is_default = dflt;
	if (props)
		p->props = *props;
	else {
		p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		p->props.location.id = ordinal;
	}
	p->reuse[CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = 1;
	p->reuse[CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC] = 1;
	p->reuse[CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES] = 1;
	atomic_thread_fence(memory_order_release);
	p->magic = FC_MAGIC_POOL;
}

CUmemoryPool fc_device_current_pool(int ordinal)
{
	pthread_mutex_lock(&pool_lock);
	if (default_pool[ordinal].magic != FC_MAGIC_POOL)
		pool_init(&default_pool[ordinal], ordinal, NULL, true);
	CUmemoryPool p = current_pool[ordinal] ? current_pool[ordinal] : &default_pool[ordinal];
	pthread_mutex_unlock(&pool_lock);
	return p;
}

void fc_pool_account(CUmemoryPool pool, int64_t delta)
{
	if (delta >= 0) {
		uint64_t now = atomic_fetch_add(&pool->used, (uint64_t)delta) + (uint64_t)delta;
		uint64_t high = atomic_load(&pool->used_high);
		while (now > high && !atomic_compare_exchange_weak(&pool->used_high, &high, now))
			;
	} else {
		fc_sub_saturating(&pool->used, (uint64_t)(-delta));
	}
}

static bool pool_valid(CUmemoryPool p)
{
	return p != NULL && p->magic == FC_MAGIC_POOL;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	FC_CHECK_INIT();
	CUresult err = CUDA_SUCCESS;
	CUcontext c = fc_stream_ctx(hStream, &err);
	if (c == NULL)
		return err;
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (pool == NULL)
		pool = fc_device_current_pool(c->ordinal);
	else if (!pool_valid(pool))
		return CUDA_ERROR_INVALID_VALUE;
	if (pool->props.maxSize && atomic_load(&pool->used) + bytesize > pool->props.maxSize)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* the memory lives on the pool's device, whatever the stream's context */
	uintptr_t p;
	CUresult r = fc_dev_alloc(c, pool->phys, bytesize, FC_KIND_ASYNC, pool, &p);
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)p;
	return r;
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_from(dptr, bytesize, NULL, hStream);
}

FC_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_from(dptr, bytesize, pool, hStream);
}

FC_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	FC_CHECK_INIT();
	CUresult err = CUDA_SUCCESS;
	if (fc_stream_ctx(hStream, &err) == NULL)
		return err;
	return fc_dev_free((uintptr_t)dptr, FC_KMASK_DEVICE, NULL);
}

FC_PT_WRAP(CUresult, cuMemAllocAsync, _ptsz, (CUdeviceptr * d, size_t n, CUstream s), (d, n, s))
FC_PT_WRAP(CUresult, cuMemAllocFromPoolAsync, _ptsz, (CUdeviceptr * d, size_t n, CUmemoryPool p, CUstream s),
	   (d, n, p, s))
FC_PT_WRAP(CUresult, cuMemFreeAsync, _ptsz, (CUdeviceptr d, CUstream s), (d, s))

FC_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pool_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	(void)fc_device_current_pool(dev);
	*pool_out = &default_pool[dev];
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pool = fc_device_current_pool(dev);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pool_valid(pool) || pool->ordinal != dev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool_lock);
	current_pool[dev] = pool;
	pthread_mutex_unlock(&pool_lock);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	FC_CHECK_INIT();
	if (pool == NULL || poolProps == NULL || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(poolProps->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	if (poolProps->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct CUmemPoolHandle_st *p = malloc(sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pool_init(p, poolProps->location.id, poolProps, false);
	*pool = p;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	FC_CHECK_INIT();
	if (!pool_valid(pool) || pool->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool_lock);
	for (unsigned i = 0; i < FC_MAX_DEVICES; i++)
		if (current_pool[i] == pool)
			current_pool[i] = NULL;
	pthread_mutex_unlock(&pool_lock);
	pool->magic = FC_MAGIC_DEAD; /* outstanding allocations still name it; keep it readable */
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	FC_CHECK_INIT();
	(void)minBytesToKeep;
	return pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Writes (set) or reads one attribute of pool. */
static CUresult pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, bool set)
{
	FC_CHECK_INIT();
	if (!pool_valid(pool) || value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		if (set)
			pool->reuse[attr] = *(int *)value;
		else
			*(int *)value = pool->reuse[attr];
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			pool->threshold = *(cuuint64_t *)value;
		else
			*(cuuint64_t *)value = pool->threshold;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			return CUDA_ERROR_INVALID_VALUE; /* read-only */
		*(cuuint64_t *)value = atomic_load(&pool->used);
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (!set) {
			*(cuuint64_t *)value = atomic_load(&pool->used_high);
			return CUDA_SUCCESS;
		}
		if (*(cuuint64_t *)value != 0) /* the only write: reset the high mark */
			return CUDA_ERROR_INVALID_VALUE;
		atomic_store(&pool->used_high, atomic_load(&pool->used));
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

FC_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, true);
}

FC_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, false);
}

FC_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	FC_CHECK_INIT();
	if (!pool_valid(pool) || (count && map == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_valid_dev(map[i].location.id))
			return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	FC_CHECK_INIT();
	if (flags == NULL || location == NULL || !pool_valid(memPool))
		return CUDA_ERROR_INVALID_VALUE;
	if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_valid_dev(location->id))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return CUDA_SUCCESS;
}
