/*
 * Virtual memory management: cuMemCreate makes a physical allocation (charged
 * to its device) backed by a range of one per-process memfd; cuMemAddressReserve
 * reserves PROT_NONE address space; cuMemMap maps the physical range into it
 * (MAP_SHARED|MAP_FIXED, still inaccessible) and cuMemSetAccess opens it. The
 * physical memory is given back when its handle is released and no longer
 * mapped anywhere, as on the real driver. Granularity is 2 MiB.
 */
#include "drv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BACKING_SIZE (1ULL << 46) /* sparse; offsets are never reused */

struct vmm_alloc {
	uint32_t magic;
	unsigned phys;
	int ordinal;
	size_t size;
	uint64_t off; /* in the backing memfd */
	CUmemAllocationProp prop;
	int refs; /* 1 until released + 1 per mapping + 1 per retain */
	bool imported; /* another process's memory: not charged here */
	fc_limtok lim; /* the limits it was charged under */
};

struct resv {
	uintptr_t base;
	size_t size;
	struct resv *next;
};

struct mapping {
	uintptr_t ptr;
	size_t size;
	struct vmm_alloc *h;
	int prot;
	struct mapping *next;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static int backing_fd = -1;
static uint64_t backing_next;
static struct resv *resvs;
static struct mapping *maps;

static CUresult backing_reserve(size_t size, uint64_t *off)
{
	if (backing_fd < 0) {
		int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
		if (fd < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (ftruncate(fd, (off_t)BACKING_SIZE) != 0) {
			close(fd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		backing_fd = fd;
	}
	if (size > BACKING_SIZE - backing_next)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*off = backing_next;
	backing_next += size;
	return CUDA_SUCCESS;
}

static void drop_ref(struct vmm_alloc *h) /* vmm_lock held */
{
	if (--h->refs > 0)
		return;
	(void)fallocate(backing_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)h->off, (off_t)h->size);
	if (!h->imported)
		fc_uncharge_lim(h->phys, h->size, h->lim);
	h->magic = FC_MAGIC_DEAD;
	free(h);
}

static struct vmm_alloc *handle_of(CUmemGenericAllocationHandle handle)
{
	struct vmm_alloc *h = (struct vmm_alloc *)(uintptr_t)handle;
	return h != NULL && h->magic == FC_MAGIC_VMM ? h : NULL;
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(prop->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					      CUmemAllocationGranularity_flags option)
{
	FC_CHECK_INIT();
	if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
				    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_prop(prop);
	if (r != CUDA_SUCCESS)
		return r;
	*granularity = FC_GRANULARITY;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	FC_CHECK_INIT();
	if (handle == NULL || flags != 0 || size == 0 || size % FC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_prop(prop);
	if (r != CUDA_SUCCESS)
		return r;
	if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	unsigned phys = fc_visible[prop->location.id];
	struct vmm_alloc *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!fc_charge_lim(phys, size, &h->lim)) {
		free(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&vmm_lock);
	r = backing_reserve(size, &h->off);
	pthread_mutex_unlock(&vmm_lock);
	if (r != CUDA_SUCCESS) {
		fc_uncharge_lim(phys, size, h->lim);
		free(h);
		return r;
	}
	fc_mark_ctx_on_device(phys);
	h->phys = phys;
	h->ordinal = prop->location.id;
	h->size = size;
	h->prop = *prop;
	h->refs = 1;
	h->magic = FC_MAGIC_VMM;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	FC_CHECK_INIT();
	pthread_mutex_lock(&vmm_lock);
	struct vmm_alloc *h = handle_of(handle);
	if (h == NULL) {
		pthread_mutex_unlock(&vmm_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	drop_ref(h);
	pthread_mutex_unlock(&vmm_lock);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	FC_CHECK_INIT();
	if (prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	struct vmm_alloc *h = handle_of(handle);
	if (h)
		*prop = h->prop;
	pthread_mutex_unlock(&vmm_lock);
	return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				    unsigned long long flags)
{
	FC_CHECK_INIT();
	if (ptr == NULL || size == 0 || size % FC_GRANULARITY || flags != 0 || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < FC_GRANULARITY)
		alignment = FC_GRANULARITY;
	if (size > SIZE_MAX - alignment)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct resv *rv = malloc(sizeof(*rv));
	if (rv == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = MAP_FAILED;
	if (addr && addr % alignment == 0)
		p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != MAP_FAILED && (uintptr_t)p != addr) {
		munmap(p, size);
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED) {
		size_t len = size + alignment;
		char *q = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (q == MAP_FAILED) {
			free(rv);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		uintptr_t a = ((uintptr_t)q + alignment - 1) & ~(uintptr_t)(alignment - 1);
		if (a > (uintptr_t)q)
			munmap(q, a - (uintptr_t)q);
		uintptr_t end = (uintptr_t)q + len;
		if (end > a + size)
			munmap((void *)(a + size), end - (a + size));
		p = (void *)a;
	}
	rv->base = (uintptr_t)p;
	rv->size = size;
	pthread_mutex_lock(&vmm_lock);
	rv->next = resvs;
	resvs = rv;
	pthread_mutex_unlock(&vmm_lock);
	*ptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static struct resv *resv_containing(uintptr_t p, size_t size)
{
	for (struct resv *r = resvs; r; r = r->next)
		if (p >= r->base && p - r->base <= r->size && size <= r->size - (p - r->base))
			return r;
	return NULL;
}

static void unmap_one(struct mapping *m) /* vmm_lock held; m unlinked */
{
	(void)mmap((void *)m->ptr, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	drop_ref(m->h);
	free(m);
}

FC_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	FC_CHECK_INIT();
	pthread_mutex_lock(&vmm_lock);
	struct resv **pp = &resvs;
	while (*pp && !((*pp)->base == (uintptr_t)ptr && (*pp)->size == size))
		pp = &(*pp)->next;
	if (*pp == NULL) {
		pthread_mutex_unlock(&vmm_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct resv *r = *pp;
	*pp = r->next;
	/* mappings left inside are dropped with the range */
	struct mapping **mp = &maps;
	while (*mp) {
		struct mapping *m = *mp;
		if (m->ptr >= r->base && m->ptr - r->base < r->size) {
			*mp = m->next;
			unmap_one(m);
		} else {
			mp = &m->next;
		}
	}
	munmap((void *)r->base, r->size);
	pthread_mutex_unlock(&vmm_lock);
	free(r);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			 unsigned long long flags)
{
	FC_CHECK_INIT();
	uintptr_t p = (uintptr_t)ptr;
	if (flags != 0 || size == 0 || size % FC_GRANULARITY || p % FC_GRANULARITY || offset % FC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rv = CUDA_SUCCESS;
	pthread_mutex_lock(&vmm_lock);
	struct vmm_alloc *h = handle_of(handle);
	struct mapping *m = NULL;
	if (h == NULL || offset > h->size || size > h->size - offset || resv_containing(p, size) == NULL) {
		rv = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (struct mapping *o = maps; o; o = o->next)
		if (p < o->ptr + o->size && o->ptr < p + size) {
			rv = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	m = calloc(1, sizeof(*m));
	if (m == NULL) {
		rv = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, backing_fd, (off_t)(h->off + offset)) == MAP_FAILED) {
		free(m);
		rv = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	m->ptr = p;
	m->size = size;
	m->h = h;
	m->next = maps;
	maps = m;
	h->refs++;
out:
	pthread_mutex_unlock(&vmm_lock);
	return rv;
}

FC_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	FC_CHECK_INIT();
	uintptr_t p = (uintptr_t)ptr;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	/* the range must consist of whole mappings */
	for (struct mapping *m = maps; m; m = m->next) {
		bool overlaps = m->ptr < p + size && p < m->ptr + m->size;
		bool inside = m->ptr >= p && m->ptr + m->size <= p + size;
		if (overlaps && !inside) {
			pthread_mutex_unlock(&vmm_lock);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	int n = 0;
	struct mapping **mp = &maps;
	while (*mp) {
		struct mapping *m = *mp;
		if (m->ptr >= p && m->ptr + m->size <= p + size) {
			*mp = m->next;
			unmap_one(m);
			n++;
		} else {
			mp = &m->next;
		}
	}
	pthread_mutex_unlock(&vmm_lock);
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	FC_CHECK_INIT();
	uintptr_t p = (uintptr_t)ptr;
	if (desc == NULL || count == 0 || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int prot = PROT_NONE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_valid_dev(desc[i].location.id))
			return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			prot = PROT_READ | PROT_WRITE;
		else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
			prot = PROT_READ;
		else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ)
			return CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_lock(&vmm_lock);
	/* every byte of the range must be mapped */
	size_t covered = 0;
	for (struct mapping *m = maps; m; m = m->next) {
		uintptr_t lo = m->ptr > p ? m->ptr : p;
		uintptr_t hi = m->ptr + m->size < p + size ? m->ptr + m->size : p + size;
		if (lo < hi)
			covered += hi - lo;
	}
	CUresult rv = CUDA_SUCCESS;
	if (covered != size) {
		rv = CUDA_ERROR_INVALID_VALUE;
	} else if (mprotect((void *)p, size, prot) != 0) {
		rv = CUDA_ERROR_INVALID_VALUE;
	} else {
		for (struct mapping *m = maps; m; m = m->next)
			if (m->ptr < p + size && p < m->ptr + m->size)
				m->prot = prot;
	}
	pthread_mutex_unlock(&vmm_lock);
	return rv;
}

FC_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	FC_CHECK_INIT();
	if (flags == NULL || location == NULL || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    !fc_valid_dev(location->id))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rv = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	for (struct mapping *m = maps; m; m = m->next)
		if ((uintptr_t)ptr >= m->ptr && (uintptr_t)ptr - m->ptr < m->size) {
			*flags = m->prot == (PROT_READ | PROT_WRITE) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
				 : m->prot == PROT_READ		   ? CU_MEM_ACCESS_FLAGS_PROT_READ
								   : CU_MEM_ACCESS_FLAGS_PROT_NONE;
			rv = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&vmm_lock);
	return rv;
}

FC_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	FC_CHECK_INIT();
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rv = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	for (struct mapping *m = maps; m; m = m->next)
		if ((uintptr_t)addr >= m->ptr && (uintptr_t)addr - m->ptr < m->size) {
			m->h->refs++;
			*handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
			rv = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&vmm_lock);
	return rv;
}

#define FC_SHARE_MAGIC 0x46435348u /* "HSCF" */

struct share_rec {
	uint32_t magic;
	uint32_t pid;
	uint64_t handle;
	uint64_t size;
	uint32_t phys;
	int32_t ordinal;
	CUmemAllocationProp prop;
};

FC_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					     CUmemAllocationHandleType handleType, unsigned long long flags)
{
	FC_CHECK_INIT();
	if (shareableHandle == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&vmm_lock);
	struct vmm_alloc *h = handle_of(handle);
	struct share_rec rec;
	memset(&rec, 0, sizeof(rec));
	if (h != NULL) {
		rec.magic = FC_SHARE_MAGIC;
		rec.pid = (uint32_t)getpid();
		rec.handle = handle;
		rec.size = h->size;
		rec.phys = h->phys;
		rec.ordinal = h->ordinal;
		rec.prop = h->prop;
	}
	bool exportable = h != NULL && (h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	pthread_mutex_unlock(&vmm_lock);
	if (h == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!exportable)
		return CUDA_ERROR_NOT_SUPPORTED; /* not created with that handle type */
	int fd = memfd_create("fakecuda-share", 0);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (pwrite(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec)) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
					       CUmemAllocationHandleType shHandleType)
{
	FC_CHECK_INIT();
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	int fd = (int)(intptr_t)osHandle; /* the POSIX handle is passed by value */
	struct share_rec rec;
	if (pread(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) || rec.magic != FC_SHARE_MAGIC ||
	    rec.phys >= fc_shm->ndev || rec.size == 0 || rec.size % FC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	if (rec.pid == (uint32_t)getpid()) {
		struct vmm_alloc *h = handle_of(rec.handle);
		if (h != NULL)
			h->refs++;
		pthread_mutex_unlock(&vmm_lock);
		if (h == NULL)
			return CUDA_ERROR_INVALID_VALUE; /* released since */
		*handle = rec.handle;
		return CUDA_SUCCESS;
	}
	struct vmm_alloc *h = calloc(1, sizeof(*h));
	CUresult r = h != NULL ? backing_reserve(rec.size, &h->off) : CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&vmm_lock);
	if (r != CUDA_SUCCESS) {
		free(h);
		return r;
	}
	h->phys = rec.phys;
	h->ordinal = rec.ordinal;
	h->size = rec.size;
	h->prop = rec.prop;
	h->refs = 1;
	h->imported = true;
	h->magic = FC_MAGIC_VMM;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	return CUDA_SUCCESS;
}

/* The mapping containing p (for cuMemGetAddressRange); 0 if there is one. */
int fc_vmm_range(uintptr_t p, uintptr_t *base, size_t *size)
{
	int rv = -1;
	pthread_mutex_lock(&vmm_lock);
	for (struct mapping *m = maps; m; m = m->next)
		if (p >= m->ptr && p - m->ptr < m->size) {
			*base = m->ptr;
			*size = m->size;
			rv = 0;
			break;
		}
	pthread_mutex_unlock(&vmm_lock);
	return rv;
}
