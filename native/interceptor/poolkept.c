/*
 * What stream-ordered pools keep (docs/charging.md "Pools"). A pool's
 * free does not give its bytes back to the GPU: the pool keeps them (up to
 * its release threshold after a synchronisation, all of them with the
 * threshold "max" that PyTorch's and RMM's pools set) and the driver's
 * per-process figure, which the audit reads, still counts them. So a free
 * of pool memory keeps its charge, counted here as kept on its ledger GPU;
 * an allocation from a pool takes from kept before it reserves anything.
 * When a reservation on a GPU would be refused while its pools keep bytes,
 * the pools of that GPU are trimmed (cuMemPoolTrimTo 0: unused memory only)
 * and what they no longer hold, by the driver's own figures (reserved less
 * used), is given back; then the reservation is tried again. After a
 * synchronisation, a trim, a pool's destruction and in a memory query,
 * what the pools released is given back, without trimming.
 *
 * Kept is counted per ledger GPU, not per pool: an allocation from one
 * pool is taken to reuse what another pool of its GPU keeps.
 */
#include "gs.h"

#include <pthread.h>

static uint64_t kept[GS_MAX_GPUS];
/* kept on g when a refresh last found nothing to give back (the pools
 * keep it all: release threshold "max"), ~0 otherwise: a synchronisation
 * with kept unchanged since then skips the driver's figures */
static uint64_t idle_at[GS_MAX_GPUS];
static pthread_mutex_t refresh_mu = PTHREAD_MUTEX_INITIALIZER;

#define POOLS_MAX 64 /* pools looked at per device in one refresh */

uint64_t gs_kept_take(int g, uint64_t n)
{
	uint64_t k = __atomic_load_n(&kept[g], __ATOMIC_RELAXED);
	while (k != 0) {
		uint64_t t = k < n ? k : n;
		if (__atomic_compare_exchange_n(&kept[g], &k, k - t, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return t;
	}
	return 0;
}

void gs_kept_put(int g, uint64_t n)
{
	if (n != 0)
		__atomic_fetch_add(&kept[g], n, __ATOMIC_RELAXED);
}

/* Adds pool to list (n entries) unless it is there; the new count. */
static int add_pool(uint64_t *list, int n, uint64_t pool)
{
	if (pool == 0 || n >= POOLS_MAX)
		return n;
	for (int i = 0; i < n; i++)
		if (list[i] == pool)
			return n;
	list[n] = pool;
	return n + 1;
}

/* What the pools of the devices on ledger GPU g hold unused, by the
 * driver's figures, after trimming them when trim is set. */
static uint64_t pools_unused(int g, int trim)
{
	gs_pfn_cuDeviceGetMemPool cur = GS_REAL(cuDeviceGetMemPool);
	gs_pfn_cuDeviceGetDefaultMemPool dflt = GS_REAL(cuDeviceGetDefaultMemPool);
	gs_pfn_cuMemPoolTrimTo trimto = GS_REAL(cuMemPoolTrimTo);
	gs_pfn_cuMemPoolGetAttribute get = GS_REAL(cuMemPoolGetAttribute);
	if (get == NULL)
		return UINT64_MAX; /* cannot tell: nothing is given back */
	uint64_t unused = 0;
	for (int dev = 0; dev < GS_MAX_ORDINALS; dev++) {
		if (__atomic_load_n(&gs.devmap[dev], __ATOMIC_RELAXED) != g)
			continue;
		uint64_t list[POOLS_MAX];
		int n = gs_pool_list(dev, list, POOLS_MAX);
		CUmemoryPool p = NULL;
		if (cur != NULL && cur(&p, dev) == CUDA_SUCCESS)
			n = add_pool(list, n, (uint64_t)(uintptr_t)p);
		p = NULL;
		if (dflt != NULL && dflt(&p, dev) == CUDA_SUCCESS)
			n = add_pool(list, n, (uint64_t)(uintptr_t)p);
		for (int i = 0; i < n; i++) {
			CUmemoryPool pool = (CUmemoryPool)(uintptr_t)list[i];
			if (trim && trimto != NULL)
				trimto(pool, 0);
			cuuint64_t res = 0, used = 0;
			if (get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS ||
			    get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
				continue; /* a pool destroyed meanwhile holds nothing */
			if (res > used)
				unused += res - used;
		}
	}
	return unused;
}

/* refresh_mu held */
static uint64_t refresh_locked(int g, int trim)
{
	/* kept first: a free between the two reads counts in the pools' figure
	 * and not here, so it can only make less look released */
	uint64_t k = __atomic_load_n(&kept[g], __ATOMIC_RELAXED);
	uint64_t unused = pools_unused(g, trim);
	uint64_t back = 0;
	if (k > unused) {
		back = gs_kept_take(g, k - unused);
		if (back != 0)
			gs_unreserve_slow(g, back);
	}
	__atomic_store_n(&idle_at[g], back == 0 ? k : ~0ull, __ATOMIC_RELAXED);
	if (back != 0)
		gs_debug("pools on GPU %d: %llu bytes kept, %llu unused by the driver's figures%s: %llu given back",
			 g, (unsigned long long)k, (unsigned long long)unused, trim ? " after a trim" : "",
			 (unsigned long long)back);
	return back;
}

uint64_t gs_kept_refresh(int g, int trim)
{
	if ((unsigned)g >= GS_MAX_GPUS || __atomic_load_n(&kept[g], __ATOMIC_RELAXED) == 0)
		return 0;
	pthread_mutex_lock(&refresh_mu);
	uint64_t back = refresh_locked(g, trim);
	pthread_mutex_unlock(&refresh_mu);
	return back;
}

/* After a synchronisation (or a trim: force): each GPU whose pools keep
 * bytes gives back what they released. Nothing when nothing is kept, or
 * (unless forced) when kept has not changed since a refresh found the
 * pools keeping it all: one or two loads per GPU. Skipped when another
 * thread is refreshing. */
static void after_sync(int force)
{
	uint32_t n = __atomic_load_n(&gs.ngpus, __ATOMIC_RELAXED);
	for (uint32_t g = 0; g < n && g < GS_MAX_GPUS; g++) {
		uint64_t k = __atomic_load_n(&kept[g], __ATOMIC_RELAXED);
		if (k == 0 || (!force && k == __atomic_load_n(&idle_at[g], __ATOMIC_RELAXED)))
			continue;
		if (pthread_mutex_trylock(&refresh_mu) != 0)
			return;
		refresh_locked((int)g, 0);
		pthread_mutex_unlock(&refresh_mu);
	}
}

#define GS_SYNC_HOOK(sym, params, call_args, force)            \
	CUresult sym params                                    \
	{                                                      \
		gs_pfn_##sym real = GS_REAL(sym);              \
		if (GS_UNLIKELY(real == NULL))                 \
			return CUDA_ERROR_NOT_INITIALIZED;     \
		CUresult r = real call_args;                   \
		if (r == CUDA_SUCCESS)                         \
			after_sync(force);                     \
		return r;                                      \
	}

GS_SYNC_HOOK(cuCtxSynchronize, (void), (), 0)
GS_SYNC_HOOK(cuStreamSynchronize, (CUstream hStream), (hStream), 0)
GS_SYNC_HOOK(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream), 0)
GS_SYNC_HOOK(cuEventSynchronize, (CUevent hEvent), (hEvent), 0)
GS_SYNC_HOOK(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep), 1)

/* After fork: the child's pools are its own. */
void gs_kept_drop(void)
{
	for (int g = 0; g < GS_MAX_GPUS; g++) {
		__atomic_store_n(&kept[g], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&idle_at[g], ~0ull, __ATOMIC_RELAXED);
	}
	pthread_mutex_init(&refresh_mu, NULL);
}
