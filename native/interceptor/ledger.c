/*
 * Which ledger GPU a device ordinal is: the ordinal's UUID (real
 * cuDeviceGetUuid_v2, or cuDeviceGetUuid) against the UUIDs in the limits
 * file, never the ordinal itself (CUDA_VISIBLE_DEVICES renumbers). The
 * answer is cached per ordinal after the first use.
 */
#include <string.h>

#include "gpu_uuid.h"
#include "gs.h"

static unsigned char warned[GS_MAX_ORDINALS + 1];

int gs_uuid_to_gpu(const char *uuid)
{
	for (uint32_t g = 0; g < gs.ngpus; g++) {
		const char *u = gs.lim->gpu[g].uuid;
		if (strnlen(u, GS_UUID_LEN) < GS_UUID_LEN && strcmp(u, uuid) == 0)
			return (int)g;
	}
	return GS_MAP_NONE;
}

int gs_dev_lookup_slow(int dev)
{
	CUuuid id;
	CUresult r = CUDA_ERROR_NOT_FOUND;
	gs_pfn_cuDeviceGetUuid_v2 get2 = GS_REAL(cuDeviceGetUuid_v2);
	if (get2 != NULL)
		r = get2(&id, dev);
	if (r != CUDA_SUCCESS) {
		gs_pfn_cuDeviceGetUuid get1 = GS_REAL(cuDeviceGetUuid);
		if (get1 != NULL)
			r = get1(&id, dev);
	}
	if (r != CUDA_SUCCESS) {
		gs_debug("cannot read the UUID of device %d (error %d)", dev, (int)r);
		return GS_MAP_NONE; /* not cached: the device may not exist */
	}
	char uuid[GS_UUID_LEN];
	gpu_uuid_format((const unsigned char *)id.bytes, uuid, sizeof uuid);
	int g = gs_uuid_to_gpu(uuid);
	unsigned w = (unsigned)dev < GS_MAX_ORDINALS ? (unsigned)dev : GS_MAX_ORDINALS;
	if (g == GS_MAP_NONE && !__atomic_exchange_n(&warned[w], 1, __ATOMIC_RELAXED))
		gs_log("GPU %s (device %d) is not part of session '%s'; allocations on it will fail",
		       uuid, dev, gs.session);
	else
		gs_debug("device %d is %s, ledger GPU %d", dev, uuid, g);
	if ((unsigned)dev < GS_MAX_ORDINALS)
		__atomic_store_n(&gs.devmap[dev], (signed char)g, __ATOMIC_RELAXED);
	return g;
}
