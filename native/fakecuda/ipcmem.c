/*
 * CUDA IPC of device memory: cuIpcGetMemHandle names an allocation of this
 * process (pid, address, size, device) in the 64-byte handle;
 * cuIpcOpenMemHandle in another process maps a range of that size, which is
 * not charged to the opener: the memory is the exporter's, charged to it
 * (and listed by NVML under it), as on the real driver. The opener's range
 * does not share the exporter's bytes (fakecuda keeps no cross-process
 * device memory). Opening a handle in its own process fails, as documented.
 */
#include "drv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FC_IPC_MAGIC 0x46434950u /* "PICF" */

struct ipc_rec {
	uint32_t magic;
	uint32_t pid;
	uint64_t ptr;
	uint64_t size;
	uint32_t phys;
};
_Static_assert(sizeof(struct ipc_rec) <= CU_IPC_HANDLE_SIZE, "ipc handle");

struct opened {
	uintptr_t ptr;
	size_t len;
	struct opened *next;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct opened *opened;

FC_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	FC_CHECK_INIT();
	if (pHandle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct fc_alloc a;
	if (fc_lookup_exact((uintptr_t)dptr, &a) != 0 ||
	    (a.kind != FC_KIND_DEVICE && a.kind != FC_KIND_ASYNC))
		return CUDA_ERROR_INVALID_VALUE;
	struct ipc_rec rec = {.magic = FC_IPC_MAGIC, .pid = (uint32_t)getpid(), .ptr = a.ptr, .size = a.size,
			      .phys = a.phys};
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle->reserved, &rec, sizeof(rec));
	return CUDA_SUCCESS;
}

FC_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	FC_REQUIRE_CTX(c);
	(void)c;
	if (pdptr == NULL || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	struct ipc_rec rec;
	memcpy(&rec, handle.reserved, sizeof(rec));
	if (rec.magic != FC_IPC_MAGIC || rec.size == 0 || rec.phys >= fc_shm->ndev)
		return CUDA_ERROR_INVALID_VALUE;
	if (rec.pid == (uint32_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT; /* not within the exporting process */
	struct opened *o = malloc(sizeof(*o));
	if (o == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *m = mmap(NULL, rec.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		free(o);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->ptr = (uintptr_t)m;
	o->len = rec.size;
	pthread_mutex_lock(&ipc_lock);
	o->next = opened;
	opened = o;
	pthread_mutex_unlock(&ipc_lock);
	*pdptr = (CUdeviceptr)o->ptr;
	return CUDA_SUCCESS;
}

FC_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

FC_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	FC_CHECK_INIT();
	pthread_mutex_lock(&ipc_lock);
	struct opened **pp = &opened, *o = NULL;
	for (; *pp != NULL; pp = &(*pp)->next)
		if ((*pp)->ptr == (uintptr_t)dptr) {
			o = *pp;
			*pp = o->next;
			break;
		}
	pthread_mutex_unlock(&ipc_lock);
	if (o == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)o->ptr, o->len);
	free(o);
	return CUDA_SUCCESS;
}
