/*
 * NVML's process lists: the processes that hold memory or a context on a
 * device, with the bytes each holds, from the node-wide state's per-process
 * slots (dead processes swept first, as the kernel driver frees their memory).
 * A listing reads the slots in use only (below slot_hwm), and tells a live
 * owner from a dead one without a system call (state.c).
 */
#define __NVML_API_VERSION_INTERNAL 1
#include "nvml.h"

#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"
#include "nvml_fc.h"

FC_HIDDEN unsigned fc_nvml_procs(unsigned idx, unsigned cap, void (*put)(void *, unsigned, uint32_t, uint64_t),
				 void *arr)
{
	(void)fc_state_sweep();
	unsigned n = 0;
	unsigned hwm = atomic_load_explicit(&fc_shm->slot_hwm, memory_order_acquire);
	for (unsigned i = 0; i < hwm && i < fc_shm->nslots && i < FC_SHM_SLOTS; i++) {
		struct fc_shm_slot *s = &fc_shm->slot[i];
		uint32_t pid = atomic_load(&s->pid);
		if (pid == 0 || pid == FC_PID_CLAIMED)
			continue;
		uint64_t used = atomic_load(&s->used[idx]);
		if (used == 0 && !(atomic_load(&s->ctxmask) & (1ULL << idx)))
			continue;
		if (n < cap)
			put(arr, n, pid, used);
		n++;
	}
	return n;
}

/* FAKECUDA_NVML_PROCESS_MEMORY=unavailable: the public process lists give
 * every process's memory as NVML_VALUE_NOT_AVAILABLE, as NVML does where
 * the driver cannot attribute memory to processes (docs/fakecuda.md). */
static int memory_hidden(void)
{
	static int hidden = -1;
	if (hidden < 0) {
		const char *v = getenv("FAKECUDA_NVML_PROCESS_MEMORY");
		hidden = v != NULL && strcmp(v, "unavailable") == 0;
	}
	return hidden;
}

static void put_v1(void *arr, unsigned i, uint32_t pid, uint64_t used)
{
	nvmlProcessInfo_v1_t *p = arr;
	p[i].pid = pid;
	p[i].usedGpuMemory = memory_hidden() ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE : used;
}

static void put_v2(void *arr, unsigned i, uint32_t pid, uint64_t used)
{
	nvmlProcessInfo_v2_t *p = arr;
	p[i].pid = pid;
	p[i].usedGpuMemory = memory_hidden() ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE : used;
	p[i].gpuInstanceId = 0xFFFFFFFFu;
	p[i].computeInstanceId = 0xFFFFFFFFu;
}

/* What every process-list call checks first, as the driver does. */
static nvmlReturn_t procs_args(nvmlDevice_t device, const unsigned int *infoCount, const void *infos)
{
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (fc_nvml_dev(device) == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (infoCount == NULL || (*infoCount > 0 && infos == NULL))
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

static nvmlReturn_t procs(nvmlDevice_t device, unsigned int *infoCount, void *infos,
			 void (*put)(void *, unsigned, uint32_t, uint64_t))
{
	nvmlReturn_t r = procs_args(device, infoCount, infos);
	if (r != NVML_SUCCESS)
		return r;
	unsigned cap = infos ? *infoCount : 0;
	unsigned n = fc_nvml_procs(fc_nvml_index(device), cap, put, infos);
	if (n > cap) {
		*infoCount = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*infoCount = n;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							 nvmlProcessInfo_v1_t *infos)
{
	return procs(device, infoCount, infos, put_v1);
}

FC_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							    nvmlProcessInfo_v2_t *infos)
{
	return procs(device, infoCount, infos, put_v2);
}

FC_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							    nvmlProcessInfo_t *infos)
{
	return procs(device, infoCount, infos, put_v2);
}

/*
 * Graphics processes: fakecuda's GPUs have no display and no graphics
 * context, so the list is empty, as NVIDIA's driver answers on a
 * datacenter GPU: NVML_SUCCESS with a count of 0. (NOT_SUPPORTED here
 * made Slurm's gpu/nvml log an error at every accounting sample.)
 */
static nvmlReturn_t no_graphics(nvmlDevice_t device, unsigned int *infoCount, const void *infos)
{
	nvmlReturn_t r = procs_args(device, infoCount, infos);
	if (r == NVML_SUCCESS)
		*infoCount = 0;
	return r;
}

FC_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							  nvmlProcessInfo_v1_t *infos)
{
	return no_graphics(device, infoCount, infos);
}

FC_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							     nvmlProcessInfo_v2_t *infos)
{
	return no_graphics(device, infoCount, infos);
}

FC_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							     nvmlProcessInfo_t *infos)
{
	return no_graphics(device, infoCount, infos);
}
