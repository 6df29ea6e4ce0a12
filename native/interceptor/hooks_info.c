/*
 * Memory queries, virtualised to the session's quota on the physical GPU:
 * total = min(limit, physical), free = max(0, limit - used) and never more
 * than the driver reports free. A GPU that is not part of the session shows
 * 0. When attach failed, free is 0 (nothing can be allocated).
 */
#include <string.h>

#include "gs.h"

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Fill free, total and used for ledger GPU g from the driver figures. */
static void virtual_mem(int g, uint64_t real_free, uint64_t real_total, uint64_t *free,
			uint64_t *total, uint64_t *used)
{
	if (g < 0) {
		*free = *total = *used = 0;
		return;
	}
	uint64_t limit = __atomic_load_n(&gs.lim->gpu[g].limit, __ATOMIC_ACQUIRE);
	uint64_t u = gs_real_used(g); /* credit kept by threads is free */
	*total = min64(limit, real_total);
	*free = min64(limit > u ? limit - u : 0, real_free);
	*used = u;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	gs_pfn_cuMemGetInfo_v2 real = GS_REAL(cuMemGetInfo_v2);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT || (free == NULL && total == NULL))
		return real(free, total); /* nothing to virtualise: the driver's own answer */
	size_t rf = 0, rt = 0;
	CUresult r = real(&rf, &rt);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t f = 0, t = rt, u;
	if (st == GS_ST_ACTIVE) {
		gs_pfn_cuCtxGetDevice getdev = GS_REAL(cuCtxGetDevice);
		CUdevice dev;
		int g = GS_MAP_NONE;
		if (getdev != NULL && getdev(&dev) == CUDA_SUCCESS)
			g = gs_dev_to_gpu(dev);
		gs_kept_refresh(g, 0); /* what synchronisations let go of */
		virtual_mem(g, rf, rt, &f, &t, &u);
	}
	if (free != NULL)
		*free = (size_t)f;
	if (total != NULL)
		*total = (size_t)t;
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	gs_pfn_cuDeviceTotalMem_v2 real = GS_REAL(cuDeviceTotalMem_v2);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT || bytes == NULL)
		return real(bytes, dev);
	size_t rt = 0;
	CUresult r = real(&rt, dev);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t t = rt, f, u;
	if (st == GS_ST_ACTIVE)
		virtual_mem(gs_dev_to_gpu(dev), rt, rt, &f, &t, &u);
	if (bytes != NULL)
		*bytes = (size_t)t;
	return CUDA_SUCCESS;
}

/* Ledger GPU of an NVML device, by UUID. */
static int nvml_gpu(nvmlDevice_t device)
{
	gs_pfn_nvmlDeviceGetUUID getuuid = GS_REAL(nvmlDeviceGetUUID);
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	if (getuuid == NULL || getuuid(device, uuid, sizeof(uuid)) != NVML_SUCCESS)
		return GS_MAP_NONE;
	uuid[sizeof(uuid) - 1] = '\0';
	return gs_uuid_to_gpu(uuid);
}

/* Both NVML memory records (nvmlMemory_t, nvmlMemory_v2_t): ask the real
 * NVML, then rewrite total, free and used; `more` is run on the record as
 * well (the v2 record's reserved memory is not the session's). */
#define GS_NVML_MEMINFO(sym, type, more)                                                            \
	nvmlReturn_t sym(nvmlDevice_t device, type *memory)                                         \
	{                                                                                           \
		gs_pfn_##sym real = GS_REAL(sym);                                                   \
		if (GS_UNLIKELY(real == NULL))                                                      \
			return NVML_ERROR_FUNCTION_NOT_FOUND;                                       \
		int st = gs_state();                                                                \
		nvmlReturn_t r = real(device, memory);                                              \
		if (st == GS_ST_INERT || r != NVML_SUCCESS || memory == NULL)                       \
			return r;                                                                   \
		uint64_t f = 0, t = memory->total, u = memory->total;                               \
		if (st == GS_ST_ACTIVE)                                                             \
			virtual_mem(nvml_gpu(device), memory->free, memory->total, &f, &t, &u);     \
		memory->total = t;                                                                  \
		more;                                                                               \
		memory->free = f;                                                                   \
		memory->used = u;                                                                   \
		return r;                                                                           \
	}

GS_NVML_MEMINFO(nvmlDeviceGetMemoryInfo, nvmlMemory_t, (void)0)
GS_NVML_MEMINFO(nvmlDeviceGetMemoryInfo_v2, nvmlMemory_v2_t, memory->reserved = 0)
