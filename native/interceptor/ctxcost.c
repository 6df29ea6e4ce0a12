/*
 * What a context costs. On a GPU every context holds device memory
 * (hundreds of MiB; less with lazy loading) that no allocation hook sees.
 * It is reserved in the ledger when a context becomes active and released
 * with it, so a job over its quota is refused at context creation (or at
 * its next allocation) rather than found by the daemon's audit.
 *
 * Whose figure: gpusliced measures it on each idle GPU (gpuslice-ctxprobe)
 * and a new session's ledger starts with it (gpu[g].ctx_cost); then no
 * process of the job measures. Otherwise:
 * How much: measured from the driver's own per-process figure, the one
 * the audit reads (NVML's running processes): this process's usage on the
 * device before and after its first context there. The first process of
 * the session to measure it on a GPU leaves the figure in the ledger
 * (gpu[g].ctx_cost); the session's later processes charge that figure
 * without loading NVML at all (a job's ranks share GPU, driver and
 * program). A process charges every later context on the device the same
 * figure. Where NVML cannot answer the cost is 0 (the audit cannot see it
 * either) and nothing is left in the ledger. The figure in the ledger is
 * the job's own (its processes can write it): a wrong one changes what the
 * job's contexts are charged, never another job's, and the audit, which
 * reads NVML itself, still holds each process to the quota. NVML itself
 * is loaded and started (nvml_start) only by a process that has to
 * measure: a session's later processes never load it.
 *
 * Which contexts (every change with gs_ctx_mu held):
 *  - a device's primary context: charged at the retain that finds it
 *    uncharged (its first, or the first after a reset), released when a
 *    release leaves it inactive or a reset destroys its resources
 *    (hooks_ctx.c);
 *  - created contexts (cuCtxCreate, all versions): charged at creation,
 *    released by cuCtxDestroy or the cuCtxDetach that destroys them.
 * A context whose cost does not fit the quota (or that is on a GPU outside
 * the session, when it costs anything) is destroyed again and refused with
 * CUDA_ERROR_OUT_OF_MEMORY. The table of created contexts has a fixed
 * size: when it is full, a new context is refused (fails closed).
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpu_uuid.h"
#include "gs.h"

#define GS_MAX_CTX 256

struct ctx_charge {
	uint64_t ctx; /* 0: free */
	int dev;
	int g;
	uint64_t bytes;
};

static struct ctx_charge created[GS_MAX_CTX];
static struct {
	int charged;
	int g;
	uint64_t bytes;
} prim[GS_MAX_ORDINALS];
static uint64_t cost_of[GS_MAX_ORDINALS];
static unsigned char cost_known[GS_MAX_ORDINALS];
static int nvml_state; /* 1 ready, -1 unavailable (set once by nvml_start) */
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_start(void)
{
	gs_pfn_nvmlInit_v2 init = GS_REAL(nvmlInit_v2);
	nvml_state = init != NULL && init() == NVML_SUCCESS ? 1 : -1;
}

/* After fork (child): no context of the parent is the child's. */
void gs_ctxcost_drop(void)
{
	for (int i = 0; i < GS_MAX_CTX; i++)
		created[i].ctx = 0;
	for (int d = 0; d < GS_MAX_ORDINALS; d++)
		prim[d].charged = 0;
}

/* This process's usage on dev as NVML reports it; -1 when NVML cannot say. */
static int own_usage(CUdevice dev, uint64_t *out)
{
	gs_pfn_nvmlDeviceGetHandleByUUID byuuid = GS_REAL(nvmlDeviceGetHandleByUUID);
	gs_pfn_nvmlDeviceGetComputeRunningProcesses_v3 procs = GS_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
	gs_pfn_cuDeviceGetUuid_v2 getuuid = GS_REAL(cuDeviceGetUuid_v2);
	if (byuuid == NULL || procs == NULL || getuuid == NULL)
		return -1;
	pthread_once(&nvml_once, nvml_start);
	if (nvml_state < 0)
		return -1;
	CUuuid id;
	if (getuuid(&id, dev) != CUDA_SUCCESS)
		return -1;
	char uuid[GS_UUID_LEN];
	gpu_uuid_format((const unsigned char *)id.bytes, uuid, sizeof uuid);
	nvmlDevice_t h;
	if (byuuid(uuid, &h) != NVML_SUCCESS)
		return -1;
	nvmlProcessInfo_t small[32], *info = small;
	unsigned int n = 32;
	nvmlReturn_t r = procs(h, &n, info);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
		n += 16;
		info = calloc(n, sizeof(*info));
		if (info == NULL)
			return -1;
		r = procs(h, &n, info);
	}
	int rv = -1;
	if (r == NVML_SUCCESS) {
		unsigned int self = (unsigned int)getpid();
		*out = 0;
		rv = 0;
		for (unsigned int i = 0; i < n; i++) {
			if (info[i].pid != self)
				continue;
			if (info[i].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
				rv = -1; /* not a figure: NVML cannot say */
			else
				*out = info[i].usedGpuMemory;
		}
	}
	if (info != small)
		free(info);
	return rv;
}

/* The cost a process of the session measured on ledger GPU g: 1 and *out,
 * or 0 when there is none (or none that fits the GPU). */
static int shared_cost(int g, uint64_t *out)
{
	if (g < 0 || gs.ctr == NULL || gs.lim == NULL)
		return 0;
	uint64_t v = __atomic_load_n(&gs.ctr->gpu[g].ctx_cost, __ATOMIC_ACQUIRE);
	if (v == 0 || v - 1 > __atomic_load_n(&gs.lim->gpu[g].physical, __ATOMIC_RELAXED))
		return 0;
	*out = v - 1;
	return 1;
}

/* Leave a measured cost for the session's later processes (the first
 * measurement stays). */
static void share_cost(int g, uint64_t cost)
{
	if (g < 0 || gs.ctr == NULL)
		return;
	uint64_t none = 0;
	__atomic_compare_exchange_n(&gs.ctr->gpu[g].ctx_cost, &none, cost + 1, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
}

/* 1 when this process holds a charged context on dev. */
static int has_context_on(CUdevice dev)
{
	if (prim[dev].charged)
		return 1;
	for (int i = 0; i < GS_MAX_CTX; i++)
		if (created[i].ctx != 0 && created[i].dev == dev)
			return 1;
	return 0;
}

int gs_ctxcost_begin(struct gs_ctxcharge *c, CUdevice dev)
{
	c->active = 0;
	c->measure = 0;
	c->bytes = 0;
	if ((unsigned)dev >= GS_MAX_ORDINALS)
		return -1;
	c->dev = dev;
	c->g = gs_dev_to_gpu(dev);
	if (!cost_known[dev] && shared_cost(c->g, &cost_of[dev]))
		cost_known[dev] = 1;
	if (!cost_known[dev]) {
		/* first context here: measured around its creation */
		c->measure = !has_context_on(dev) && own_usage(dev, &c->before) == 0;
		if (!c->measure) {
			cost_known[dev] = 1; /* NVML cannot tell: 0 */
			cost_of[dev] = 0;
		}
		return 0;
	}
	c->bytes = cost_of[dev];
	if (c->bytes == 0)
		return 0;
	if (c->g < 0 || gs_reserve_once(c->g, c->bytes) < 0)
		return -1;
	c->active = 1;
	return 0;
}

int gs_ctxcost_end(struct gs_ctxcharge *c, CUresult r)
{
	if (r != CUDA_SUCCESS) {
		if (c->active)
			gs_unreserve_once(c->g, c->bytes);
		c->active = 0;
		return 0;
	}
	if (c->measure) {
		uint64_t after = 0;
		int known = own_usage(c->dev, &after) == 0;
		uint64_t cost = known && after > c->before ? after - c->before : 0;
		if (known)
			share_cost(c->g, cost);
		cost_of[c->dev] = cost;
		cost_known[c->dev] = 1;
		gs_debug("a context on device %d costs %llu bytes (NVML)", c->dev, (unsigned long long)cost);
		c->bytes = cost;
		if (cost != 0) {
			if (c->g < 0 || gs_reserve_once(c->g, cost) < 0)
				return -1;
			c->active = 1;
		}
	}
	return 0;
}

int gs_ctxcost_record(const struct gs_ctxcharge *c, CUcontext ctx)
{
	for (int i = 0; i < GS_MAX_CTX; i++) {
		if (created[i].ctx == 0) {
			created[i].ctx = (uint64_t)(uintptr_t)ctx;
			created[i].dev = c->dev;
			created[i].g = c->g;
			created[i].bytes = c->active ? c->bytes : 0;
			return 0;
		}
	}
	return -1;
}

int gs_ctxcost_room(void)
{
	for (int i = 0; i < GS_MAX_CTX; i++)
		if (created[i].ctx == 0)
			return 1;
	return 0;
}

void gs_ctxcost_release(CUcontext ctx)
{
	uint64_t k = (uint64_t)(uintptr_t)ctx;
	if (k == 0)
		return;
	for (int i = 0; i < GS_MAX_CTX; i++) {
		if (created[i].ctx == k) {
			if (created[i].bytes != 0)
				gs_unreserve_once(created[i].g, created[i].bytes);
			created[i].ctx = 0;
			return;
		}
	}
}

int gs_ctxcost_primary_charged(CUdevice dev)
{
	return (unsigned)dev < GS_MAX_ORDINALS && prim[dev].charged;
}

void gs_ctxcost_primary_set(const struct gs_ctxcharge *c)
{
	prim[c->dev].charged = 1;
	prim[c->dev].g = c->g;
	prim[c->dev].bytes = c->active ? c->bytes : 0;
}

void gs_ctxcost_primary_release(CUdevice dev)
{
	if ((unsigned)dev >= GS_MAX_ORDINALS || !prim[dev].charged)
		return;
	if (prim[dev].bytes != 0)
		gs_unreserve_once(prim[dev].g, prim[dev].bytes);
	prim[dev].charged = 0;
}
