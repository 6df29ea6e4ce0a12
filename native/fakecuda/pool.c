/*
 * Stream-ordered allocation and memory pools. Each device has a default pool;
 * cuMemPoolCreate makes more. A pool holds device memory (its reserve,
 * charged to the device and the process, so NVML shows it): an allocation
 * takes from what the pool keeps and grows the reserve by what is short; a
 * free keeps the bytes in the pool; a synchronisation (cuCtxSynchronize,
 * cuStreamSynchronize, cuEventSynchronize) gives back every pool's reserve
 * above max(used, release threshold), as the driver does (default threshold
 * 0: all that is unused), and cuMemPoolTrimTo what is above max(used, the
 * bytes to keep). Reuse is by bytes: the model has no fragmentation.
 * FAKECUDA_POOL_RESERVE=0: a pool keeps nothing (every free gives back).
 */
#include "drv.h"

#include <stdlib.h>
#include <string.h>

static struct CUmemPoolHandle_st default_pool[FC_MAX_DEVICES];
static CUmemoryPool current_pool[FC_MAX_DEVICES];
static struct CUmemPoolHandle_st *all_pools; /* under pool_lock */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static int keeps = -1; /* FAKECUDA_POOL_RESERVE; -1: not read yet */

static bool pools_keep(void)
{
	int k = __atomic_load_n(&keeps, __ATOMIC_RELAXED);
	if (k < 0) {
		const char *e = getenv("FAKECUDA_POOL_RESERVE");
		k = !(e != NULL && strcmp(e, "0") == 0);
		__atomic_store_n(&keeps, k, __ATOMIC_RELAXED);
	}
	return k;
}

/* under pool_lock */
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
	pthread_mutex_init(&p->lock, NULL);
	p->next = all_pools;
	all_pools = p;
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

/* Gives back the reserve above keep (under pool->lock). */
static void pool_release_above(CUmemoryPool pool, uint64_t keep)
{
	if (pool->reserved > keep) {
		fc_uncharge_lim(pool->phys, pool->reserved - keep, pool->lim);
		pool->reserved = keep;
	}
}

CUresult fc_pool_take(CUmemoryPool pool, uint64_t n)
{
	pthread_mutex_lock(&pool->lock);
	uint64_t used = pool->used;
	if (pool->props.maxSize && used + n > pool->props.maxSize) {
		pthread_mutex_unlock(&pool->lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t avail = pool->reserved - used;
	if (n > avail) {
		fc_limtok lim;
		if (!fc_charge_lim(pool->phys, n - avail, &lim)) {
			pthread_mutex_unlock(&pool->lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		pool->lim = lim; /* a process's charges all go under the same limits */
		pool->reserved += n - avail;
		if (pool->reserved > pool->reserved_high)
			pool->reserved_high = pool->reserved;
	}
	pool->used = used + n;
	if (pool->used > pool->used_high)
		pool->used_high = pool->used;
	pthread_mutex_unlock(&pool->lock);
	return CUDA_SUCCESS;
}

void fc_pool_give(CUmemoryPool pool, uint64_t n)
{
	pthread_mutex_lock(&pool->lock);
	pool->used = pool->used > n ? pool->used - n : 0;
	if (!pools_keep() || pool->magic != FC_MAGIC_POOL)
		pool_release_above(pool, pool->used);
	pthread_mutex_unlock(&pool->lock);
}

void fc_pools_sync(void)
{
	pthread_mutex_lock(&pool_lock);
	for (struct CUmemPoolHandle_st *p = all_pools; p != NULL; p = p->next) {
		pthread_mutex_lock(&p->lock);
		pool_release_above(p, p->used > p->threshold ? p->used : p->threshold);
		pthread_mutex_unlock(&p->lock);
	}
	pthread_mutex_unlock(&pool_lock);
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
	pthread_mutex_lock(&pool_lock);
	pool_init(p, poolProps->location.id, poolProps, false);
	pthread_mutex_unlock(&pool_lock);
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
	pthread_mutex_lock(&pool->lock);
	pool->magic = FC_MAGIC_DEAD; /* outstanding allocations still name it; keep it readable */
	pool_release_above(pool, pool->used); /* and give back each as it is freed */
	pthread_mutex_unlock(&pool->lock);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	FC_CHECK_INIT();
	if (!pool_valid(pool))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool->lock);
	uint64_t used = pool->used;
	pool_release_above(pool, used > minBytesToKeep ? used : minBytesToKeep);
	pthread_mutex_unlock(&pool->lock);
	return CUDA_SUCCESS;
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
		pthread_mutex_lock(&pool->lock);
		if (set)
			pool->threshold = *(cuuint64_t *)value;
		else
			*(cuuint64_t *)value = pool->threshold;
		pthread_mutex_unlock(&pool->lock);
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			return CUDA_ERROR_INVALID_VALUE; /* read-only */
		pthread_mutex_lock(&pool->lock);
		*(cuuint64_t *)value =
			attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? pool->reserved : pool->used;
		pthread_mutex_unlock(&pool->lock);
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		pthread_mutex_lock(&pool->lock);
		if (!set) {
			*(cuuint64_t *)value = attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ? pool->reserved_high
											: pool->used_high;
		} else if (*(cuuint64_t *)value != 0) { /* the only write: reset the high mark */
			pthread_mutex_unlock(&pool->lock);
			return CUDA_ERROR_INVALID_VALUE;
		} else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
			pool->reserved_high = pool->reserved;
		} else {
			pool->used_high = pool->used;
		}
		pthread_mutex_unlock(&pool->lock);
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
