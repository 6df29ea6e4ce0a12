/*
 * NVML's memory limits per cgroup (R615, CUDA 13.4):
 * nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1, on the
 * table memlimit.c keeps in the node's state.
 *
 * After NVIDIA's API reference: nameSpace is the full sysfs path of a
 * cgroup v2 directory; softLimit is what is guaranteed before allocations
 * may fail under memory pressure, hardLimit the most that can be
 * allocated; softLimit 0 with hardLimit NVML_DEVICE_MEMORY_LIMIT_MAX is "no
 * limit" (setting it clears); removing the cgroup clears its limits;
 * setting needs root, reading does not; MIG handles are not supported.
 * A state made without FAKECUDA_MEMORY_LIMITS=1 is a driver without the
 * calls: both answer NVML_ERROR_NOT_SUPPORTED.
 */
#define __NVML_API_VERSION_INTERNAL 1
#include "nvml.h"

#include "nvml_fc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The checks both calls share; *idx is the device's physical index. */
static nvmlReturn_t common(nvmlDevice_t device, const char *ns, bool null_limits, unsigned *idx, uint64_t *cgid)
{
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (fc_nvml_dev(device) == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!fc_limits_enabled())
		return NVML_ERROR_NOT_SUPPORTED;
	if (null_limits || ns == NULL || ns[0] == 0 || strlen(ns) >= FC_LIM_PATH)
		return NVML_ERROR_INVALID_ARGUMENT;
	*idx = fc_nvml_index(device);
	*cgid = fc_cgroup_id(ns);
	return NVML_SUCCESS;
}

/* The live entry of (device, cgroup), or -1 (lim_lock held). */
static int find_locked(unsigned idx, uint64_t cgid)
{
	for (unsigned i = 0; i < FC_LIM_ENTRIES; i++) {
		struct fc_shm_limit *e = &fc_shm->limit[i];
		if ((atomic_load(&e->gen) & 1) && e->dev == idx && e->cgid == cgid)
			return (int)i;
	}
	return -1;
}

FC_API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits)
{
	unsigned idx;
	uint64_t cgid;
	nvmlReturn_t rv = common(device, limits ? limits->nameSpace : NULL, limits == NULL, &idx, &cgid);
	if (rv != NVML_SUCCESS)
		return rv;
	if (geteuid() != 0)
		return NVML_ERROR_NO_PERMISSION;
	if (cgid == 0)
		return NVML_ERROR_NOT_FOUND; /* not a cgroup v2 directory */
	const uint64_t soft = limits->softLimit, hard = limits->hardLimit;
	if (soft > hard)
		return NVML_ERROR_INVALID_ARGUMENT;
	const bool clear = soft == 0 && hard == NVML_DEVICE_MEMORY_LIMIT_MAX;
	if (fc_lim_lock() != 0)
		return NVML_ERROR_UNKNOWN;
	fc_lim_reap_locked();
	int i = find_locked(idx, cgid);
	if (i >= 0 && clear) {
		struct fc_shm_limit *e = &fc_shm->limit[i];
		atomic_fetch_add(&e->gen, 1);
		atomic_fetch_sub(&fc_shm->dev[idx].nlimits, 1);
		atomic_fetch_add(&fc_shm->lim_gen, 1);
	} else if (i >= 0) {
		fc_shm->limit[i].soft = soft;
		atomic_store(&fc_shm->limit[i].hard, hard);
	} else if (!clear) {
		for (unsigned k = 0; k < FC_LIM_ENTRIES && i < 0; k++)
			if (!(atomic_load(&fc_shm->limit[k].gen) & 1))
				i = (int)k;
		if (i < 0) {
			rv = NVML_ERROR_INSUFFICIENT_RESOURCES;
		} else {
			struct fc_shm_limit *e = &fc_shm->limit[i];
			e->dev = idx;
			e->cgid = cgid;
			e->soft = soft;
			atomic_store(&e->hard, hard);
			atomic_store(&e->used, 0); /* memory allocated before the limit is not counted */
			snprintf(e->path, sizeof(e->path), "%s", limits->nameSpace);
			atomic_fetch_add(&e->gen, 1); /* live */
			atomic_fetch_add(&fc_shm->dev[idx].nlimits, 1);
			atomic_fetch_add(&fc_shm->lim_gen, 1);
		}
	}
	fc_lim_unlock();
	return rv;
}

FC_API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits)
{
	unsigned idx;
	uint64_t cgid;
	nvmlReturn_t rv = common(device, limits ? limits->nameSpace : NULL, limits == NULL, &idx, &cgid);
	if (rv != NVML_SUCCESS)
		return rv;
	if (cgid == 0)
		return NVML_ERROR_NOT_FOUND;
	(void)fc_state_sweep(); /* a dead process's charges are given back first */
	limits->softLimit = 0;
	limits->hardLimit = NVML_DEVICE_MEMORY_LIMIT_MAX;
	limits->currentUsed = 0;
	if (fc_lim_lock() != 0)
		return NVML_ERROR_UNKNOWN;
	fc_lim_reap_locked();
	int i = find_locked(idx, cgid);
	if (i >= 0) {
		struct fc_shm_limit *e = &fc_shm->limit[i];
		limits->softLimit = e->soft;
		limits->hardLimit = atomic_load(&e->hard);
		limits->currentUsed = atomic_load(&e->used);
	}
	fc_lim_unlock();
	return NVML_SUCCESS;
}
