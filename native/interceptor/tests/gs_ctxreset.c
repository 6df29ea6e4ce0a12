/*
 * gs_ctxreset: memory the driver frees with a context (cuCtxDestroy,
 * cuDevicePrimaryCtxReset, the last cuDevicePrimaryCtxRelease,
 * cudaDeviceReset), in scenarios on device 0.
 *
 *   gs_ctxreset ctx|reset|release [legacy]
 *   gs_ctxreset runtime
 *   gs_ctxreset storm THREADS ROUNDS
 *
 * "legacy" calls the pre-rename entry points (cuCtxDestroy,
 * cuDevicePrimaryCtxReset, cuDevicePrimaryCtxRelease) instead of the _v2
 * ones. Every driver or runtime call prints "step name=N rc=R"; a call that
 * does not return what the scenario expects counts as an error. At each
 * checkpoint the program prints
 *
 *   paused at=NAME held=BYTES driver=BYTES
 *
 * (held: what the program holds by its own count, each cuMemAlloc as the
 * driver takes it (alloc_granule.h); driver: what the driver says this
 * process holds, from NVML's process list) and waits for a line
 * on stdin, so the caller can compare the ledger with both. The last line
 * is "done errors=E".
 *
 * storm: THREADS threads allocate and free (cuMemAlloc, cuMemAllocManaged,
 * arrays; 1..4 MiB, at most 4 blocks each) in one created context while
 * the main thread runs ROUNDS rounds of: allocate 104 MiB in another
 * context and take it down with that context (cuCtxDestroy, primary
 * context reset, last primary release, in turn). Between rounds it waits
 * until every thread has done at least one more operation. Under a 256 MiB
 * quota nothing is ever denied when the ledger is exact; a context's memory
 * left charged would be denied within three rounds.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_granule.h"
#include "cuda.h"
#include "nvml.h"

/* the pre-rename entry points (same ABI as their successors) */
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);

#define MiB (1ull << 20)

static int legacy;
static CUdevice dev;
static uint64_t held; /* main thread's bytes (storm: plus the threads' when paused) */
static unsigned long long errors;

static void step(const char *name, int rc, int want)
{
	printf("step name=%s rc=%d\n", name, rc);
	fflush(stdout);
	if (rc != want) {
		__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
		fprintf(stderr, "gs_ctxreset: %s: rc=%d, want %d\n", name, rc, want);
	}
}

#define OK(name, call) step(name, (int)(call), 0)

static CUresult ctx_destroy(CUcontext c) { return legacy ? cuCtxDestroy(c) : cuCtxDestroy_v2(c); }
static CUresult primary_reset(void) { return legacy ? cuDevicePrimaryCtxReset(dev) : cuDevicePrimaryCtxReset_v2(dev); }
static CUresult primary_release(void)
{
	return legacy ? cuDevicePrimaryCtxRelease(dev) : cuDevicePrimaryCtxRelease_v2(dev);
}

/* What the driver says this process holds on device 0 (NVML process list). */
static uint64_t driver_held(void)
{
	static int ready;
	static nvmlDevice_t nd;
	if (!ready) {
		if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &nd) != NVML_SUCCESS)
			return UINT64_MAX;
		ready = 1;
	}
	nvmlProcessInfo_t info[64];
	unsigned int n = 64;
	if (nvmlDeviceGetComputeRunningProcesses_v3(nd, &n, info) != NVML_SUCCESS)
		return UINT64_MAX;
	for (unsigned i = 0; i < n; i++)
		if (info[i].pid == (unsigned)getpid())
			return info[i].usedGpuMemory;
	return 0;
}

static void checkpoint(const char *at, uint64_t bytes)
{
	printf("paused at=%s held=%llu driver=%llu\n", at, (unsigned long long)bytes,
	       (unsigned long long)driver_held());
	fflush(stdout);
	char line[64];
	if (fgets(line, sizeof(line), stdin) == NULL)
		exit(3);
}

/* ---- a set of allocations of every context-bound kind ---- */

struct set {
	CUdeviceptr plain, managed, pitched;
	CUarray array;
	CUmipmappedArray mipmap;
};

#define SET_BYTES ((128 + 32 + 16 + 16 + 5) * MiB)

/* 128 MiB cuMemAlloc, 32 MiB managed, 4096 x 4096 pitched (pitch 4096:
 * 16 MiB), a 2048 x 2048 float array (16 MiB), a 1024 x 1024 float
 * mipmapped array of two levels (4 + 1 MiB): SET_BYTES in all. */
static void set_alloc(struct set *s)
{
	size_t pitch = 0;
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 2048, .Height = 2048, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CUDA_ARRAY3D_DESCRIPTOR md = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	OK("alloc", cuMemAlloc_v2(&s->plain, 128 * MiB));
	OK("managed", cuMemAllocManaged(&s->managed, 32 * MiB, CU_MEM_ATTACH_GLOBAL));
	OK("pitch", cuMemAllocPitch_v2(&s->pitched, &pitch, 4096, 4096, 4));
	step("pitch_is_4096", pitch == 4096 ? 0 : 1, 0);
	OK("array", cuArrayCreate_v2(&s->array, &ad));
	OK("mipmap", cuMipmappedArrayCreate(&s->mipmap, &md, 2));
	held += SET_BYTES;
}

static void set_free(struct set *s)
{
	OK("free", cuMemFree_v2(s->plain));
	OK("free_managed", cuMemFree_v2(s->managed));
	OK("free_pitch", cuMemFree_v2(s->pitched));
	OK("array_destroy", cuArrayDestroy(s->array));
	OK("mipmap_destroy", cuMipmappedArrayDestroy(s->mipmap));
	held -= SET_BYTES;
}

/* Memory freed into a pool stays the pool's until a synchronisation or
 * a trim: trim the device's default pool. */
static CUresult pool_trim(void)
{
	CUmemoryPool p;
	CUresult r = cuDeviceGetDefaultMemPool(&p, dev);
	return r == CUDA_SUCCESS ? cuMemPoolTrimTo(p, 0) : r;
}

/* ---- (a) a created context destroyed with its memory ---- */

static void scenario_ctx(void)
{
	CUcontext c1, c2;
	struct set s;
	CUdeviceptr pooled;
	CUmemGenericAllocationHandle vmm;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;

	OK("ctx_create", cuCtxCreate_v2(&c1, 0, dev));
	set_alloc(&s);
	/* neither belongs to the context: both outlive it */
	OK("pool_alloc", cuMemAllocAsync(&pooled, 16 * MiB, NULL));
	OK("vmm_create", cuMemCreate(&vmm, 2 * MiB, &prop, 0));
	held += 18 * MiB;
	checkpoint("allocated", held);

	OK("ctx_destroy", ctx_destroy(c1));
	held -= SET_BYTES;
	checkpoint("destroyed", held);

	OK("ctx_create2", cuCtxCreate_v2(&c2, 0, dev));
	set_alloc(&s);
	checkpoint("again", held);

	OK("pool_free", cuMemFreeAsync(pooled, NULL));
	OK("pool_trim", pool_trim()); /* the pool gives back what it kept */
	OK("vmm_release", cuMemRelease(vmm));
	held -= 18 * MiB;
	OK("ctx_destroy2", ctx_destroy(c2));
	held -= SET_BYTES;
	checkpoint("end", held);
}

/* ---- (b) the primary context reset ---- */

static void scenario_reset(void)
{
	CUcontext p;
	struct set s;
	CUdeviceptr pooled;
	OK("retain", cuDevicePrimaryCtxRetain(&p, dev));
	OK("set_current", cuCtxSetCurrent(p));
	set_alloc(&s);
	OK("pool_alloc", cuMemAllocAsync(&pooled, 16 * MiB, NULL));
	held += 16 * MiB;
	checkpoint("allocated", held);

	OK("reset", primary_reset());
	held -= SET_BYTES;
	checkpoint("reset", held);

	set_alloc(&s);
	checkpoint("again", held);

	/* a reset with nothing charged in the context, then a release to 0 */
	set_free(&s);
	OK("pool_free", cuMemFreeAsync(pooled, NULL));
	OK("pool_trim", pool_trim()); /* the pool gives back what it kept */
	held -= 16 * MiB;
	OK("reset_empty", primary_reset());
	OK("release", primary_release());
	checkpoint("end", held);
}

/* ---- (c) primary releases: only the last one frees ---- */

static void scenario_release(void)
{
	CUcontext p, q;
	struct set s;
	OK("retain", cuDevicePrimaryCtxRetain(&p, dev));
	OK("retain_again", cuDevicePrimaryCtxRetain(&q, dev));
	step("same_primary", p == q ? 0 : 1, 0);
	OK("set_current", cuCtxSetCurrent(p));
	set_alloc(&s);
	checkpoint("allocated", held);

	/* one reference left: nothing is freed, everything stays charged and
	 * is freed one by one as usual */
	OK("release_not_last", primary_release());
	checkpoint("released_once", held);
	set_free(&s);
	checkpoint("freed", held);
	set_alloc(&s);
	checkpoint("allocated_again", held);

	OK("release_last", primary_release());
	held -= SET_BYTES;
	checkpoint("released", held);

	OK("retain_after", cuDevicePrimaryCtxRetain(&p, dev));
	OK("set_current_after", cuCtxSetCurrent(p));
	set_alloc(&s);
	checkpoint("again", held);
	OK("release_end", primary_release());
	held -= SET_BYTES;
	checkpoint("end", held);
}

/* ---- (d) the runtime: cudaDeviceReset ---- */

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*reset_fn)(void);
typedef int (*malloc_async_fn)(void **, size_t, void *);
typedef int (*free_async_fn)(void *, void *);

static void scenario_runtime(void)
{
	void *rt = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
	if (rt == NULL) {
		fprintf(stderr, "gs_ctxreset: %s\n", dlerror());
		exit(2);
	}
	malloc_fn rt_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
	free_fn rt_free = (free_fn)dlsym(rt, "cudaFree");
	reset_fn rt_reset = (reset_fn)dlsym(rt, "cudaDeviceReset");
	malloc_async_fn rt_malloc_async = (malloc_async_fn)dlsym(rt, "cudaMallocAsync");
	free_async_fn rt_free_async = (free_async_fn)dlsym(rt, "cudaFreeAsync");
	if (!rt_malloc || !rt_free || !rt_reset || !rt_malloc_async || !rt_free_async) {
		fprintf(stderr, "gs_ctxreset: runtime entry points missing\n");
		exit(2);
	}
	void *a, *b, *pooled;
	OK("cudaMalloc", rt_malloc(&a, 150 * MiB));
	OK("cudaMalloc", rt_malloc(&b, 50 * MiB));
	OK("cudaMallocAsync", rt_malloc_async(&pooled, 16 * MiB, NULL)); /* survives the reset */
	held += 216 * MiB;
	checkpoint("allocated", held);

	OK("cudaDeviceReset", rt_reset());
	held -= 200 * MiB;
	checkpoint("reset", held);

	OK("cudaMalloc_again", rt_malloc(&a, 150 * MiB));
	OK("cudaMalloc_again", rt_malloc(&b, 50 * MiB));
	held += 200 * MiB;
	checkpoint("again", held);

	OK("cudaFree", rt_free(a));
	OK("cudaFree", rt_free(b));
	OK("cudaFreeAsync", rt_free_async(pooled, NULL));
	OK("pool_trim", pool_trim());
	held -= 216 * MiB;
	checkpoint("end", held);
}

/* ---- (e) threads at work in one context while others are torn down ---- */

#define BLOCKS 4

struct worker {
	pthread_t th;
	unsigned id;
	uint64_t held;             /* read by main only while the worker is parked */
	unsigned long long ops;    /* atomic: operations done */
	struct {
		int kind; /* 0 pointer, 1 array */
		uint64_t h, bytes;
	} b[BLOCKS];
	int n;
};

static CUcontext work_ctx;
static int pause_req, stop_req, parked;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void worker_free(struct worker *w, int i)
{
	CUresult r = w->b[i].kind ? cuArrayDestroy((CUarray)(uintptr_t)w->b[i].h) : cuMemFree_v2(w->b[i].h);
	if (r != CUDA_SUCCESS) {
		__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
		fprintf(stderr, "gs_ctxreset: worker %u free: %d\n", w->id, (int)r);
	}
	w->held -= w->b[i].bytes;
	w->b[i] = w->b[--w->n];
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x9E3779B97F4A7C15ull * (w->id + 1);
	if (cuCtxSetCurrent(work_ctx) != CUDA_SUCCESS) {
		__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	while (!__atomic_load_n(&stop_req, __ATOMIC_ACQUIRE)) {
		if (__atomic_load_n(&pause_req, __ATOMIC_ACQUIRE)) {
			__atomic_fetch_add(&parked, 1, __ATOMIC_ACQ_REL);
			while (__atomic_load_n(&pause_req, __ATOMIC_ACQUIRE))
				sched_yield();
			__atomic_fetch_sub(&parked, 1, __ATOMIC_ACQ_REL);
			continue;
		}
		uint64_t r = rnd(&seed);
		if (w->n == BLOCKS || (w->n > 0 && r % 2)) {
			worker_free(w, (int)((r >> 8) % (uint64_t)w->n));
		} else {
			uint64_t bytes = (1 + (r >> 8) % 4) * MiB, taken = bytes;
			CUresult rc;
			uint64_t h = 0;
			int kind = 0;
			switch ((r >> 16) % 3) {
			case 0:
				rc = cuMemAlloc_v2((CUdeviceptr *)&h, bytes);
				taken = gs_alloc_rounded(bytes); /* what the driver takes */
				break;
			case 1:
				rc = cuMemAllocManaged((CUdeviceptr *)&h, bytes, CU_MEM_ATTACH_GLOBAL);
				break;
			default: {
				CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = bytes / 4096,
							    .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
				CUarray a = NULL;
				rc = cuArrayCreate_v2(&a, &ad);
				h = (uint64_t)(uintptr_t)a;
				kind = 1;
			}
			}
			if (rc != CUDA_SUCCESS) {
				__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
				fprintf(stderr, "gs_ctxreset: worker %u alloc %llu: %d\n", w->id, (unsigned long long)bytes,
					(int)rc);
			} else {
				w->b[w->n].kind = kind;
				w->b[w->n].h = h;
				w->b[w->n].bytes = taken;
				w->n++;
				w->held += taken;
			}
		}
		__atomic_fetch_add(&w->ops, 1, __ATOMIC_RELEASE);
	}
	while (w->n > 0)
		worker_free(w, w->n - 1);
	return NULL;
}

/* 4 x 24 MiB and an 8 MiB array in the current context */
static void round_alloc(CUdeviceptr p[4], CUarray *a)
{
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 2048, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	for (int i = 0; i < 4; i++)
		OK("round_alloc", cuMemAlloc_v2(&p[i], 24 * MiB));
	OK("round_array", cuArrayCreate_v2(a, &ad));
}

static void scenario_storm(unsigned threads, unsigned rounds)
{
	struct worker *w = calloc(threads, sizeof(*w));
	if (w == NULL)
		exit(2);
	CUcontext popped;
	OK("work_ctx", cuCtxCreate_v2(&work_ctx, 0, dev));
	OK("pop", cuCtxPopCurrent_v2(&popped));
	for (unsigned i = 0; i < threads; i++) {
		w[i].id = i;
		pthread_create(&w[i].th, NULL, worker_main, &w[i]);
	}
	unsigned long long *seen = calloc(threads, sizeof(*seen));
	for (unsigned r = 0; r < rounds; r++) {
		/* every thread has moved on since the last round */
		for (unsigned i = 0; i < threads; i++) {
			while (__atomic_load_n(&w[i].ops, __ATOMIC_ACQUIRE) == seen[i])
				sched_yield();
			seen[i] = __atomic_load_n(&w[i].ops, __ATOMIC_ACQUIRE);
		}
		CUdeviceptr p[4];
		CUarray a;
		CUcontext c;
		switch (r % 3) {
		case 0:
			OK("round_create", cuCtxCreate_v2(&c, 0, dev));
			round_alloc(p, &a);
			OK("round_destroy", ctx_destroy(c));
			break;
		case 1:
			OK("round_retain", cuDevicePrimaryCtxRetain(&c, dev));
			OK("round_push", cuCtxPushCurrent_v2(c));
			round_alloc(p, &a);
			OK("round_reset", primary_reset());
			OK("round_pop", cuCtxPopCurrent_v2(&popped));
			OK("round_release", primary_release());
			break;
		default:
			OK("round_retain", cuDevicePrimaryCtxRetain(&c, dev));
			OK("round_push", cuCtxPushCurrent_v2(c));
			round_alloc(p, &a);
			OK("round_pop", cuCtxPopCurrent_v2(&popped));
			OK("round_release_last", primary_release());
			break;
		}
	}
	__atomic_store_n(&pause_req, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&parked, __ATOMIC_ACQUIRE) != (int)threads)
		sched_yield();
	uint64_t sum = 0;
	unsigned long long ops = 0;
	for (unsigned i = 0; i < threads; i++) {
		sum += w[i].held;
		ops += __atomic_load_n(&w[i].ops, __ATOMIC_ACQUIRE);
	}
	printf("storm rounds=%u ops=%llu\n", rounds, ops);
	checkpoint("storm", sum);
	__atomic_store_n(&stop_req, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&pause_req, 0, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(w[i].th, NULL);
	OK("work_ctx_destroy", cuCtxDestroy_v2(work_ctx));
	checkpoint("end", 0);
	free(seen);
	free(w);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: gs_ctxreset ctx|reset|release [legacy] | runtime | storm THREADS ROUNDS\n");
		return 2;
	}
	legacy = argc > 2 && strcmp(argv[2], "legacy") == 0;
	if (strcmp(argv[1], "runtime") != 0) {
		OK("init", cuInit(0));
		OK("device", cuDeviceGet(&dev, 0));
	}
	if (strcmp(argv[1], "ctx") == 0)
		scenario_ctx();
	else if (strcmp(argv[1], "reset") == 0)
		scenario_reset();
	else if (strcmp(argv[1], "release") == 0)
		scenario_release();
	else if (strcmp(argv[1], "runtime") == 0)
		scenario_runtime();
	else if (strcmp(argv[1], "storm") == 0 && argc == 4)
		scenario_storm((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]));
	else {
		fprintf(stderr, "gs_ctxreset: unknown scenario %s\n", argv[1]);
		return 2;
	}
	printf("done errors=%llu\n", errors);
	return errors ? 1 : 0;
}
