/*
 * Device and host allocations.
 *
 * Device memory is real, addressable memory: anonymous MAP_NORESERVE
 * mappings, so copies work and untouched "device" memory costs no RAM.
 * Capacity is charged node-wide with one CAS (fc_charge) on the device's
 * counter. Each allocation has a record in a sharded hash table keyed by its
 * address (one short critical section on one of 256 shard locks per
 * alloc/free). Mappings of up to 2 MiB are recycled through a small
 * per-thread cache instead of being unmapped, so the common path costs no
 * system call; freed device memory keeps its contents, as on a GPU.
 * cuMemAlloc and cuMemAllocPitch take what the driver's do on the device
 * (alloc_granule.h: above 1 MiB, a multiple of 2 MiB), the pointer valid
 * for the size asked; FAKECUDA_ALLOC_GRANULE=0 takes the size asked.
 */
#include "drv.h"
#include "alloc_granule.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* allocation table                                                    */
/* ------------------------------------------------------------------ */
#define NSHARDS 256
#define INITIAL_BUCKETS 64

struct shard {
	pthread_mutex_t lock;
	struct fc_alloc **b;
	size_t nb; /* power of two */
	size_t n;
} __attribute__((aligned(64)));

static struct shard shards[NSHARDS];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned long long next_thread_no = 1;
static __thread unsigned long long tls_ids; /* thread number << 40 | allocations counted by this thread */

/* Buffer ids, unique per process without a shared counter on the hot path. */
static inline unsigned long long next_id(void)
{
	if (FC_UNLIKELY(tls_ids == 0))
		tls_ids = atomic_fetch_add(&next_thread_no, 1) << 40;
	return ++tls_ids;
}

static void table_init(void)
{
	for (int i = 0; i < NSHARDS; i++)
		pthread_mutex_init(&shards[i].lock, NULL);
}

static inline uint64_t hash_ptr(uintptr_t p)
{
	return (uint64_t)(p >> 8) * 0x9E3779B97F4A7C15ULL;
}

static inline struct shard *shard_of(uint64_t h)
{
	return &shards[h >> 56];
}

static inline size_t bucket_of(uint64_t h, size_t nb)
{
	return (size_t)(h >> 20) & (nb - 1);
}

static int grow(struct shard *s)
{
	size_t nb = s->nb ? s->nb * 2 : INITIAL_BUCKETS;
	struct fc_alloc **b = calloc(nb, sizeof(*b));
	if (b == NULL)
		return -1;
	for (size_t i = 0; i < s->nb; i++) {
		struct fc_alloc *a = s->b[i];
		while (a) {
			struct fc_alloc *next = a->next;
			size_t k = bucket_of(hash_ptr(a->ptr), nb);
			a->next = b[k];
			b[k] = a;
			a = next;
		}
	}
	free(s->b);
	s->b = b;
	s->nb = nb;
	return 0;
}

static int table_insert(struct fc_alloc *a)
{
	pthread_once(&table_once, table_init);
	uint64_t h = hash_ptr(a->ptr);
	struct shard *s = shard_of(h);
	int rv = 0;
	pthread_mutex_lock(&s->lock);
	if (s->n + 1 > s->nb * 2 && grow(s) != 0 && s->nb == 0) {
		rv = -1;
	} else {
		size_t k = bucket_of(h, s->nb);
		a->next = s->b[k];
		s->b[k] = a;
		s->n++;
	}
	pthread_mutex_unlock(&s->lock);
	return rv;
}

/* Unlinks the record starting exactly at p whose kind is in mask. */
static struct fc_alloc *table_remove(uintptr_t p, unsigned mask)
{
	pthread_once(&table_once, table_init);
	uint64_t h = hash_ptr(p);
	struct shard *s = shard_of(h);
	struct fc_alloc *found = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->nb) {
		struct fc_alloc **pp = &s->b[bucket_of(h, s->nb)];
		for (; *pp; pp = &(*pp)->next) {
			if ((*pp)->ptr == p && (mask & FC_KMASK((*pp)->kind))) {
				found = *pp;
				*pp = found->next;
				s->n--;
				break;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return found;
}

int fc_lookup_exact(uintptr_t p, struct fc_alloc *out)
{
	pthread_once(&table_once, table_init);
	uint64_t h = hash_ptr(p);
	struct shard *s = shard_of(h);
	int rv = -1;
	pthread_mutex_lock(&s->lock);
	if (s->nb) {
		for (struct fc_alloc *a = s->b[bucket_of(h, s->nb)]; a; a = a->next) {
			if (a->ptr == p) {
				*out = *a;
				rv = 0;
				break;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rv;
}

/* Interior pointers: a scan of the table (rare calls only). */
int fc_lookup_range(uintptr_t p, struct fc_alloc *out)
{
	if (fc_lookup_exact(p, out) == 0)
		return 0;
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &shards[i];
		int rv = -1;
		pthread_mutex_lock(&s->lock);
		for (size_t k = 0; k < s->nb && rv; k++) {
			for (struct fc_alloc *a = s->b[k]; a; a = a->next) {
				size_t len = a->size ? a->size : 1;
				if (p >= a->ptr && p - a->ptr < len) {
					*out = *a;
					rv = 0;
					break;
				}
			}
		}
		pthread_mutex_unlock(&s->lock);
		if (rv == 0)
			return 0;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* mappings, with a per-thread cache of recently freed small ones      */
/* ------------------------------------------------------------------ */
#define CACHE_MIN_SHIFT 12
#define CACHE_MAX_SHIFT 21
#define CACHE_CLASSES (CACHE_MAX_SHIFT - CACHE_MIN_SHIFT + 1)
#define CACHE_DEPTH 8
#define CACHE_MAX_BYTES (16u << 20)

struct tcache {
	uintptr_t m[CACHE_CLASSES][CACHE_DEPTH];
	uint8_t n[CACHE_CLASSES];
	bool keyed;
	size_t bytes;
};

static __thread struct tcache tc;
static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

static void tc_destroy(void *arg)
{
	struct tcache *c = arg;
	for (int k = 0; k < CACHE_CLASSES; k++) {
		for (int i = 0; i < c->n[k]; i++)
			munmap((void *)c->m[k][i], (size_t)1 << (k + CACHE_MIN_SHIFT));
		c->n[k] = 0;
	}
	c->bytes = 0;
}

static void tc_key_init(void)
{
	(void)pthread_key_create(&tc_key, tc_destroy);
}

static inline int size_class(size_t size)
{
	if (size > ((size_t)1 << CACHE_MAX_SHIFT))
		return -1;
	int shift = size <= ((size_t)1 << CACHE_MIN_SHIFT) ? CACHE_MIN_SHIFT : 64 - __builtin_clzll(size - 1);
	return shift - CACHE_MIN_SHIFT;
}

static size_t page_round(size_t n)
{
	const size_t pg = 4096;
	return (n + pg - 1) & ~(pg - 1);
}

static void *map_get(size_t size, size_t *maplen)
{
	int k = size_class(size);
	size_t len;
	if (k >= 0) {
		len = (size_t)1 << (k + CACHE_MIN_SHIFT);
		if (tc.n[k] > 0) {
			tc.bytes -= len;
			*maplen = len;
			return (void *)tc.m[k][--tc.n[k]];
		}
	} else {
		if (size > SIZE_MAX - 4096)
			return NULL;
		len = page_round(size);
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*maplen = len;
	return p;
}

static void map_put(uintptr_t p, size_t maplen)
{
	int k = size_class(maplen);
	if (k >= 0 && ((size_t)1 << (k + CACHE_MIN_SHIFT)) == maplen && tc.n[k] < CACHE_DEPTH &&
	    tc.bytes + maplen <= CACHE_MAX_BYTES) {
		if (FC_UNLIKELY(!tc.keyed)) {
			pthread_once(&tc_once, tc_key_init);
			(void)pthread_setspecific(tc_key, &tc);
			tc.keyed = true;
		}
		tc.m[k][tc.n[k]++] = p;
		tc.bytes += maplen;
		return;
	}
	munmap((void *)p, maplen);
}

/* Fills in a new allocation's record (with a fresh id) and enters it in
 * the table; 0, or nonzero when the table has no room. */
static inline int record_insert(struct fc_alloc *a, uintptr_t ptr, size_t size, size_t maplen, CUcontext ctx,
				unsigned kind, unsigned flags)
{
	a->ptr = ptr;
	a->size = size;
	a->maplen = maplen;
	a->ctx = ctx;
	a->kind = kind;
	a->flags = flags;
	a->id = next_id();
	return table_insert(a);
}

/* ------------------------------------------------------------------ */
/* device allocations                                                  */
/* ------------------------------------------------------------------ */
/* Charges size to the device, or takes it from pool (which charges what
 * it has to grow by). */
static inline bool dev_charge(CUmemoryPool pool, unsigned phys, size_t size, fc_limtok *lim)
{
	*lim = NULL;
	if (pool)
		return fc_pool_take(pool, size) == CUDA_SUCCESS;
	return fc_charge_lim(phys, size, lim);
}

static inline void dev_uncharge(CUmemoryPool pool, unsigned phys, size_t size, fc_limtok lim)
{
	if (pool)
		fc_pool_give(pool, size);
	else
		fc_uncharge_lim(phys, size, lim);
}

/* An allocation of size bytes (mapped: the pointer is valid for size)
 * that takes `taken` bytes (>= size) on the device. */
static CUresult dev_alloc(CUcontext ctx, unsigned phys, size_t size, size_t taken, unsigned kind, CUmemoryPool pool,
			  uintptr_t *out)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	fc_limtok lim;
	if (FC_UNLIKELY(!dev_charge(pool, phys, taken, &lim)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct fc_alloc *a = malloc(sizeof(*a));
	size_t maplen = 0;
	void *p = a ? map_get(size, &maplen) : NULL;
	if (FC_UNLIKELY(p == NULL)) {
		free(a);
		dev_uncharge(pool, phys, taken, lim);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->pool = pool;
	a->phys = phys;
	a->lim = lim;
	a->taken = taken;
	if (FC_UNLIKELY(record_insert(a, (uintptr_t)p, size, maplen, ctx, kind, 0) != 0)) {
		map_put(a->ptr, maplen);
		free(a);
		dev_uncharge(pool, phys, taken, lim);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = (uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult fc_dev_alloc(CUcontext ctx, unsigned phys, size_t size, unsigned kind, CUmemoryPool pool, uintptr_t *out)
{
	return dev_alloc(ctx, phys, size, size, kind, pool, out);
}

/* What a cuMemAlloc / cuMemAllocPitch of size takes on the device. */
static inline size_t alloc_taken(size_t size)
{
	return FC_LIKELY(fc_alloc_granule) ? (size_t)gs_alloc_rounded(size) : size;
}

CUresult fc_dev_free(uintptr_t ptr, unsigned kind_mask, struct fc_alloc *copy_out)
{
	struct fc_alloc *a = table_remove(ptr, kind_mask);
	if (FC_UNLIKELY(a == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	dev_uncharge(a->pool, a->phys, a->taken, a->lim);
	map_put(a->ptr, a->maplen);
	if (copy_out)
		*copy_out = *a;
	free(a);
	return CUDA_SUCCESS;
}

/* What the driver frees with a context: cuMemAlloc, cuMemAllocManaged and
 * cuMemAllocPitch memory and arrays. Stream-ordered allocations belong to
 * their pool, not to a context, and survive it (as cuCtxDestroy's and
 * cudaDeviceReset's documentation says); so does VMM memory (vmm.c). */
void fc_free_ctx_allocs(CUcontext ctx)
{
	const unsigned mask = FC_KMASK(FC_KIND_DEVICE) | FC_KMASK(FC_KIND_MANAGED) | FC_KMASK(FC_KIND_ARRAY);
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &shards[i];
		struct fc_alloc *victims = NULL;
		pthread_mutex_lock(&s->lock);
		for (size_t k = 0; k < s->nb; k++) {
			struct fc_alloc **pp = &s->b[k];
			while (*pp) {
				struct fc_alloc *a = *pp;
				if (a->ctx == ctx && (mask & FC_KMASK(a->kind))) {
					*pp = a->next;
					s->n--;
					a->next = victims;
					victims = a;
				} else {
					pp = &a->next;
				}
			}
		}
		pthread_mutex_unlock(&s->lock);
		while (victims) {
			struct fc_alloc *a = victims;
			victims = a->next;
			dev_uncharge(a->pool, a->phys, a->taken, a->lim);
			munmap((void *)a->ptr, a->maplen);
			free(a);
		}
	}
}

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	FC_REQUIRE_CTX(c);
	if (FC_UNLIKELY(dptr == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t p;
	CUresult r = dev_alloc(c, c->phys, bytesize, alloc_taken(bytesize), FC_KIND_DEVICE, NULL, &p);
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)p;
	return r;
}

FC_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	FC_CHECK_INIT();
	if (dptr == 0)
		return CUDA_SUCCESS;
	return fc_dev_free((uintptr_t)dptr, FC_KMASK_DEVICE, NULL);
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				   unsigned int ElementSizeBytes)
{
	FC_REQUIRE_CTX(c);
	if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
		return CUDA_ERROR_INVALID_VALUE;
	if (WidthInBytes > SIZE_MAX - FC_PITCH_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	size_t pitch = (WidthInBytes + FC_PITCH_ALIGN - 1) / FC_PITCH_ALIGN * FC_PITCH_ALIGN;
	if (Height > SIZE_MAX / pitch)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uintptr_t p;
	CUresult r = dev_alloc(c, c->phys, pitch * Height, alloc_taken(pitch * Height), FC_KIND_DEVICE, NULL, &p);
	if (r == CUDA_SUCCESS) {
		*dptr = (CUdeviceptr)p;
		*pPitch = pitch;
	}
	return r;
}

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	FC_REQUIRE_CTX(c);
	if (dptr == NULL || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t p;
	CUresult r = fc_dev_alloc(c, c->phys, bytesize, FC_KIND_MANAGED, NULL, &p);
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)p;
	return r;
}

FC_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	FC_REQUIRE_CTX(c);
	if (free_bytes == NULL && total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	(void)fc_state_sweep(); /* what dead processes held is free again, as on a real node */
	/* under a memory limit of the process's cgroup: capped to the hard
	 * limit and the headroom under it (NVIDIA's MPS v3 partitioning guide) */
	uint64_t t, f;
	fc_lim_meminfo(c->phys, &t, &f);
	if (free_bytes)
		*free_bytes = (size_t)f;
	if (total)
		*total = (size_t)t;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	FC_CHECK_INIT();
	struct fc_alloc a;
	uintptr_t vbase;
	size_t vsize;
	if (fc_vmm_range((uintptr_t)dptr, &vbase, &vsize) == 0) {
		if (pbase)
			*pbase = (CUdeviceptr)vbase;
		if (psize)
			*psize = vsize;
		return CUDA_SUCCESS;
	}
	if (fc_lookup_range((uintptr_t)dptr, &a) != 0 || a.kind == FC_KIND_HOST || a.kind == FC_KIND_REGISTERED)
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = (CUdeviceptr)a.ptr;
	if (psize)
		*psize = a.size;
	return CUDA_SUCCESS;
}

FC_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	FC_CHECK_INIT();
	if (data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct fc_alloc a;
	if (fc_lookup_range((uintptr_t)ptr, &a) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	const bool host = a.kind == FC_KIND_HOST || a.kind == FC_KIND_REGISTERED;
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = host ? NULL : a.ctx;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && a.kind != FC_KIND_MANAGED)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		break;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = a.id;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = a.kind == FC_KIND_MANAGED;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = host ? -1 : (a.ctx ? a.ctx->ordinal : 0);
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = (CUdeviceptr)a.ptr;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = a.size;
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = a.pool;
		break;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* host memory: never charged to a device                              */
/* ------------------------------------------------------------------ */
CUresult fc_host_alloc(size_t size, unsigned flags, void **out)
{
	if (size == 0 || size > SIZE_MAX - 4096)
		return CUDA_ERROR_INVALID_VALUE;
	size_t len = page_round(size);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct fc_alloc *a = calloc(1, sizeof(*a));
	if (a == NULL) {
		munmap(p, len);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (record_insert(a, (uintptr_t)p, size, len, fc_tls_ctx, FC_KIND_HOST, flags) != 0) {
		munmap(p, len);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = p;
	return CUDA_SUCCESS;
}

CUresult fc_host_free(void *p)
{
	struct fc_alloc *a = table_remove((uintptr_t)p, FC_KMASK(FC_KIND_HOST));
	if (a == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)a->ptr, a->maplen);
	free(a);
	return CUDA_SUCCESS;
}

int fc_register_host(uintptr_t p, size_t size, unsigned flags)
{
	struct fc_alloc tmp;
	if (fc_lookup_exact(p, &tmp) == 0)
		return -1;
	struct fc_alloc *a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -2;
	if (record_insert(a, p, size, 0, NULL, FC_KIND_REGISTERED, flags) != 0) {
		free(a);
		return -2;
	}
	return 0;
}

int fc_unregister_host(uintptr_t p)
{
	struct fc_alloc *a = table_remove(p, FC_KMASK(FC_KIND_REGISTERED));
	if (a == NULL)
		return -1;
	free(a);
	return 0;
}

FC_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	FC_CHECK_INIT();
	if (pp == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return fc_host_alloc(bytesize, 0, pp);
}

FC_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	FC_CHECK_INIT();
	if (pp == NULL ||
	    (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	return fc_host_alloc(bytesize, Flags, pp);
}

FC_API CUresult cuMemFreeHost(void *p)
{
	FC_CHECK_INIT();
	return fc_host_free(p);
}

FC_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	FC_CHECK_INIT();
	struct fc_alloc a;
	if (pdptr == NULL || Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_lookup_range((uintptr_t)p, &a) != 0 || (a.kind != FC_KIND_HOST && a.kind != FC_KIND_REGISTERED))
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	FC_CHECK_INIT();
	struct fc_alloc a;
	if (pFlags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_lookup_range((uintptr_t)p, &a) != 0 || a.kind != FC_KIND_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*pFlags = a.flags;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	FC_CHECK_INIT();
	if (p == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int r = fc_register_host((uintptr_t)p, bytesize, Flags);
	if (r == -1)
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FC_API CUresult cuMemHostUnregister(void *p)
{
	FC_CHECK_INIT();
	return fc_unregister_host((uintptr_t)p) == 0 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/*
 * The pre-3.2 entry points report sizes in 32 bits (unsigned int); values
 * that do not fit are clamped to UINT_MAX.
 */
static unsigned int clamp32(size_t v)
{
	return v > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned int)v;
}

FC_API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total);
FC_API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
	size_t f = 0, t = 0;
	CUresult r = cuMemGetInfo_v2(free_bytes ? &f : NULL, total ? &t : NULL);
	if (r != CUDA_SUCCESS)
		return r;
	if (free_bytes)
		*free_bytes = clamp32(f);
	if (total)
		*total = clamp32(t);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
FC_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b = 0;
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = cuDeviceTotalMem_v2(&b, dev);
	if (r == CUDA_SUCCESS)
		*bytes = clamp32(b);
	return r;
}
