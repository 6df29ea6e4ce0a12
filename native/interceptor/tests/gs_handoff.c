/*
 * gs_handoff: a producer thread allocates blocks of SIZE bytes
 * (cuMemAlloc_v2) for MS milliseconds; it frees every other block itself
 * right away and hands the others to the main thread, which frees them.
 * The handed pointers sit in the producer's front of the pointer table
 * (docs/charging.md "Tables"), so the main thread's releases flush that
 * front again and again while the producer goes on filling it.
 *
 *   gs_handoff MS SIZE
 *
 * Prints "handoff allocs=A handed=H alloc_failed=F free_failed=G" once
 * everything is freed, then "paused" and waits for a line on stdin before
 * exiting (the ledger can be read with the process alive).
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda.h"

#define RING 1024u

static CUdeviceptr ring[RING];
static unsigned head, tail; /* head: next to fill (producer), tail: next to take (main) */
static int stop, done;
static uint64_t size;
static CUcontext ctx;
static unsigned long long allocs, handed, alloc_failed, free_failed;

static void *producer(void *arg)
{
	(void)arg;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		alloc_failed++;
		__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
		return NULL;
	}
	for (uint64_t i = 0; !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); i++) {
		CUdeviceptr p;
		if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS) {
			alloc_failed++;
			continue;
		}
		allocs++;
		if (i & 1) {
			if (cuMemFree_v2(p) != CUDA_SUCCESS)
				free_failed++;
			continue;
		}
		while (head - __atomic_load_n(&tail, __ATOMIC_ACQUIRE) == RING)
			sched_yield();
		ring[head % RING] = p;
		__atomic_store_n(&head, head + 1, __ATOMIC_RELEASE);
		handed++;
	}
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: gs_handoff MS SIZE\n");
		return 2;
	}
	int64_t ms = atoll(argv[1]);
	size = strtoull(argv[2], NULL, 10);
	CUdevice dev;
	pthread_t t;
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    pthread_create(&t, NULL, producer, NULL) != 0) {
		printf("setup rc=2\n");
		return 2;
	}
	int64_t end = now_ms() + ms;
	for (;;) {
		if (__atomic_load_n(&tail, __ATOMIC_RELAXED) != __atomic_load_n(&head, __ATOMIC_ACQUIRE)) {
			if (cuMemFree_v2(ring[tail % RING]) != CUDA_SUCCESS)
				free_failed++;
			__atomic_store_n(&tail, tail + 1, __ATOMIC_RELEASE);
			continue;
		}
		/* done is set after the last handover: head read again after it */
		if (__atomic_load_n(&done, __ATOMIC_ACQUIRE) && tail == __atomic_load_n(&head, __ATOMIC_ACQUIRE))
			break;
		if (now_ms() >= end)
			__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
		sched_yield();
	}
	pthread_join(t, NULL);
	printf("handoff allocs=%llu handed=%llu alloc_failed=%llu free_failed=%llu\n", allocs, handed,
	       alloc_failed, free_failed);
	printf("paused\n");
	fflush(stdout);
	char line[16];
	if (fgets(line, sizeof(line), stdin) == NULL)
		return 0;
	return 0;
}
