/*
 * gs_storm: THREADS threads allocate and free device memory (cuMemAlloc_v2 /
 * cuMemFree_v2, sizes MIN..MAX bytes, each thread holding up to HOLD blocks)
 * until told to stop. Denials (CUDA_ERROR_OUT_OF_MEMORY) are expected under
 * a quota; any other error is counted as an error.
 *
 *   gs_storm THREADS MIN MAX HOLD
 *
 * Control lines on stdin:
 *   pause   every thread finishes its current step and waits; then prints
 *           "held bytes=N" (what this process holds on the GPU by its own
 *           count: each block as the driver takes it, alloc_granule.h)
 *   resume  the threads go on
 *   stop    the threads free everything and the program prints
 *           "done allocs=A denied=D errors=E" and exits
 * Prints "ready pid=P" once every thread has made its first call.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_granule.h"
#include "cuda.h"

struct worker {
	pthread_t t;
	unsigned id;
	uint64_t held;
	unsigned long long allocs, denied, errors;
	int last_error;
	char pad[64];
};

static unsigned nthreads, hold;
static uint64_t min_size, max_size;
static CUcontext ctx;
static struct worker *w;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int paused, stopping;
static unsigned parked, started;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Between steps: park while paused. Returns 1 when stopping. */
static int checkpoint(void)
{
	if (!__atomic_load_n(&paused, __ATOMIC_ACQUIRE) && !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&mu);
	if (paused) {
		parked++;
		pthread_cond_broadcast(&cv);
		while (paused && !stopping)
			pthread_cond_wait(&cv, &mu);
		parked--;
	}
	int s = stopping;
	pthread_mutex_unlock(&mu);
	return s;
}

static void *run(void *arg)
{
	struct worker *me = arg;
	uint64_t seed = 0x9E3779B97F4A7C15ull * (me->id + 1) ^ (uint64_t)getpid();
	CUdeviceptr *ptrs = calloc(hold, sizeof(*ptrs));
	uint64_t *sizes = calloc(hold, sizeof(*sizes));
	if (ptrs == NULL || sizes == NULL)
		abort();
	cuCtxSetCurrent(ctx);
	int first = 1;
	for (;;) {
		unsigned i = (unsigned)(rnd(&seed) % hold);
		if (ptrs[i] != 0) {
			CUresult r = cuMemFree_v2(ptrs[i]);
			if (r != CUDA_SUCCESS) {
				me->errors++;
				me->last_error = r;
			}
			ptrs[i] = 0;
			me->held -= sizes[i];
		} else {
			uint64_t n = min_size + rnd(&seed) % (max_size - min_size + 1);
			CUresult r = cuMemAlloc_v2(&ptrs[i], n);
			if (r == CUDA_SUCCESS) {
				sizes[i] = gs_alloc_rounded(n);
				me->held += sizes[i];
				me->allocs++;
			} else {
				ptrs[i] = 0;
				if (r == CUDA_ERROR_OUT_OF_MEMORY) {
					me->denied++;
				} else {
					me->errors++;
					me->last_error = r;
				}
			}
		}
		if (first) {
			first = 0;
			pthread_mutex_lock(&mu);
			started++;
			pthread_cond_broadcast(&cv);
			pthread_mutex_unlock(&mu);
		}
		if (checkpoint())
			break;
	}
	for (unsigned i = 0; i < hold; i++) {
		if (ptrs[i] == 0)
			continue;
		if (cuMemFree_v2(ptrs[i]) != CUDA_SUCCESS)
			me->errors++;
		me->held -= sizes[i];
	}
	free(ptrs);
	free(sizes);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: gs_storm THREADS MIN MAX HOLD\n");
		return 2;
	}
	nthreads = (unsigned)atoi(argv[1]);
	min_size = strtoull(argv[2], NULL, 0);
	max_size = strtoull(argv[3], NULL, 0);
	hold = (unsigned)atoi(argv[4]);
	if (nthreads == 0 || hold == 0 || min_size == 0 || max_size < min_size) {
		fprintf(stderr, "gs_storm: bad arguments\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdevice dev;
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGet(&dev, 0);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r != CUDA_SUCCESS) {
		printf("setup rc=%d\n", r);
		return 1;
	}
	w = calloc(nthreads, sizeof(*w));
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].id = i;
		pthread_create(&w[i].t, NULL, run, &w[i]);
	}
	pthread_mutex_lock(&mu);
	while (started < nthreads)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("ready pid=%d\n", (int)getpid());

	char line[64];
	while (fgets(line, sizeof(line), stdin) != NULL) {
		if (strncmp(line, "pause", 5) == 0) {
			pthread_mutex_lock(&mu);
			paused = 1;
			while (parked < nthreads)
				pthread_cond_wait(&cv, &mu);
			uint64_t held = 0;
			for (unsigned i = 0; i < nthreads; i++)
				held += w[i].held;
			pthread_mutex_unlock(&mu);
			printf("held bytes=%llu\n", (unsigned long long)held);
		} else if (strncmp(line, "resume", 6) == 0) {
			pthread_mutex_lock(&mu);
			paused = 0;
			pthread_cond_broadcast(&cv);
			pthread_mutex_unlock(&mu);
			printf("resumed\n");
		} else if (strncmp(line, "stop", 4) == 0) {
			break;
		}
	}
	pthread_mutex_lock(&mu);
	stopping = 1;
	paused = 0;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	unsigned long long allocs = 0, denied = 0, errors = 0;
	int last = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(w[i].t, NULL);
		allocs += w[i].allocs;
		denied += w[i].denied;
		errors += w[i].errors;
		if (w[i].last_error)
			last = w[i].last_error;
	}
	printf("done allocs=%llu denied=%llu errors=%llu last_error=%d\n", allocs, denied, errors, last);
	return 0;
}
