/*
 * gs_vmmstorm: THREADS threads each run ITER rounds of the VMM life cycle on
 * the current device, in every order the driver allows: a handle of 2..8 MiB
 * is created, mapped once or twice (apart or end to end) in the thread's own
 * reserved range, released before or after its mappings are taken down (one
 * unmap each, or one over both), sometimes retained through its address
 * first. Denials (CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate) are expected
 * under a quota; any other error is counted.
 *
 *   gs_vmmstorm THREADS ITER
 *
 * Prints "done rounds=R denied=D errors=E" and then "paused"; exits at the
 * next line (or end) on stdin, so the caller can read the ledger while the
 * process is still attached.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

#define MiB (1ull << 20)
#define RANGE (64 * MiB)

static CUcontext ctx;
static CUdevice dev;
static unsigned iters;
static unsigned long long rounds, denied, errors;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void count_err(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		if (__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "gs_vmmstorm: %s: %d\n", what, (int)r);
	}
}

static void *worker(void *arg)
{
	uint64_t seed = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
	CUdeviceptr base = 0;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAddressReserve(&base, RANGE, 0, 0, 0) != CUDA_SUCCESS) {
		__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	for (unsigned i = 0; i < iters; i++) {
		uint64_t n = (1 + rnd(&seed) % 4) * 2 * MiB;
		CUmemGenericAllocationHandle h = 0, h2 = 0;
		CUresult r = cuMemCreate(&h, n, &prop, 0);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			__atomic_fetch_add(&denied, 1, __ATOMIC_RELAXED);
			continue;
		}
		count_err(r, "create");
		if (r != CUDA_SUCCESS)
			continue;
		CUdeviceptr a = base, b = base + 32 * MiB;
		switch (rnd(&seed) % 5) {
		case 0: /* map, release, unmap */
			count_err(cuMemMap(a, n, 0, h, 0), "map");
			count_err(cuMemRelease(h), "release");
			count_err(cuMemUnmap(a, n), "unmap");
			break;
		case 1: /* two mappings apart, released in between */
			count_err(cuMemMap(a, n, 0, h, 0), "map");
			count_err(cuMemMap(b, n, 0, h, 0), "map");
			count_err(cuMemRelease(h), "release");
			count_err(cuMemUnmap(b, n), "unmap");
			count_err(cuMemUnmap(a, n), "unmap");
			break;
		case 2: /* two mappings end to end, one unmap over both */
			count_err(cuMemMap(a, n, 0, h, 0), "map");
			count_err(cuMemMap(a + n, n, 0, h, 0), "map");
			count_err(cuMemRelease(h), "release");
			count_err(cuMemUnmap(a, 2 * n), "unmap");
			break;
		case 3: /* unmap, then release */
			count_err(cuMemMap(a, n, 0, h, 0), "map");
			count_err(cuMemUnmap(a, n), "unmap");
			count_err(cuMemRelease(h), "release");
			break;
		default: /* retained through its address */
			count_err(cuMemMap(a, n, 0, h, 0), "map");
			count_err(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)a), "retain");
			count_err(cuMemRelease(h), "release");
			count_err(cuMemUnmap(a, n), "unmap");
			count_err(cuMemRelease(h2), "release");
			break;
		}
		__atomic_fetch_add(&rounds, 1, __ATOMIC_RELAXED);
	}
	count_err(cuMemAddressFree(base, RANGE), "address free");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: gs_vmmstorm THREADS ITER\n");
		return 2;
	}
	unsigned nthreads = (unsigned)atoi(argv[1]);
	iters = (unsigned)atoi(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (nthreads == 0 || nthreads > 256 || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
		fprintf(stderr, "gs_vmmstorm: setup failed\n");
		return 1;
	}
	pthread_t t[256];
	for (unsigned i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	printf("done rounds=%llu denied=%llu errors=%llu\n", rounds, denied, errors);
	printf("paused\n");
	char line[16];
	if (fgets(line, sizeof(line), stdin) == NULL)
		return 0;
	return 0;
}
