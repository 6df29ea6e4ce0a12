/*
 * caching_allocator: the pattern of a framework's caching allocator (as in
 * PyTorch) through the CUDA runtime. Requests are rounded up to 2 MiB blocks;
 * freed blocks are kept in a cache and reused for requests of the same size;
 * when cudaMalloc runs out of memory the cache is emptied (cudaFree of every
 * cached block) and the allocation retried once before it counts as denied.
 *
 *   caching_allocator [--iters N] [--live N] [--max SIZE] [--seed N] [--device N]
 *
 * Output:
 *   event=start iters=200 live=8 max=67108864
 *   event=oom request=... action=empty_cache freed_blocks=3 retry=allowed|denied
 *   event=summary requests=200 cuda_malloc=41 cache_hits=159 oom_retries=2 denied=0 peak_reserved=... reserved=0
 * Exit status: 0 when it ran as designed, 1 on an unexpected CUDA error, 2 on bad usage.
 */
#include "common.h"

#include "rtctx.h"

#define BLOCK (2ull << 20)
#define MAX_CACHE 4096

struct block {
	void *p;
	size_t size;
};

static struct block cache[MAX_CACHE];
static int ncache;
static uint64_t reserved, peak_reserved;

static int empty_cache(void)
{
	int n = 0;
	for (int i = 0; i < ncache; i++) {
		if (cudaFree(cache[i].p) == cudaSuccess) {
			reserved -= cache[i].size;
			n++;
		}
	}
	ncache = 0;
	return n;
}

static const char *usage = "[--iters N] [--live N] [--max SIZE] [--seed N] [--device N]";

int main(int argc, char **argv)
{
	long iters = 200, live = 8, seed = 1, device = 0;
	uint64_t max = 64ull << 20;
	const struct ex_option opts[] = {
		{"--iters", EX_LONG, &iters, 1, 100000000, NULL},
		{"--live", EX_LONG, &live, 1, 1024, NULL},
		{"--max", EX_SIZE, &max, (long)BLOCK, 0, "at least 2MiB"},
		{"--seed", EX_LONG, &seed, 0, 1L << 30, NULL},
		EX_DEVICE_OPTION(device),
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start iters=%ld live=%ld max=%llu pid=%d\n", iters, live, (unsigned long long)max, (int)getpid());
	if (ex_runtime_setup((int)device))
		return 1;
	cudaError_t e;
	struct block *held = calloc((size_t)live, sizeof(*held));
	long nheld = 0, requests = 0, mallocs = 0, hits = 0, oom_retries = 0, denied = 0;
	unsigned long long rng = (unsigned long long)seed * 0x9E3779B97F4A7C15ull + 1;
	int unexpected = 0;
	for (long it = 0; it < iters && !unexpected; it++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		size_t want = (size_t)(rng % max) + 1;
		size_t size = (want + BLOCK - 1) / BLOCK * BLOCK;
		requests++;
		if (nheld == live) { /* return the oldest block to the cache */
			if (ncache < MAX_CACHE)
				cache[ncache++] = held[0];
			else if (cudaFree(held[0].p) == cudaSuccess)
				reserved -= held[0].size;
			memmove(held, held + 1, (size_t)(live - 1) * sizeof(*held));
			nheld--;
		}
		struct block b = {NULL, size};
		for (int i = 0; i < ncache; i++)
			if (cache[i].size == size) {
				b = cache[i];
				cache[i] = cache[--ncache];
				hits++;
				break;
			}
		if (b.p == NULL) {
			e = cudaMalloc(&b.p, size);
			if (e == cudaErrorMemoryAllocation) {
				(void)cudaGetLastError();
				oom_retries++;
				int freed = empty_cache();
				e = cudaMalloc(&b.p, size);
				printf("event=oom request=%zu action=empty_cache freed_blocks=%d retry=%s\n", size, freed,
				       e == cudaSuccess ? "allowed" : "denied");
			}
			if (e == cudaErrorMemoryAllocation) {
				(void)cudaGetLastError();
				denied++;
				continue;
			}
			if (e != cudaSuccess) {
				printf("event=error op=malloc bytes=%zu error=%s\n", size, cudaGetErrorName(e));
				unexpected = 1;
				break;
			}
			mallocs++;
			reserved += size;
			if (reserved > peak_reserved)
				peak_reserved = reserved;
		}
		memset(b.p, (int)(it & 0xff), 64);
		held[nheld++] = b;
	}
	for (long i = 0; i < nheld; i++)
		if (cudaFree(held[i].p) == cudaSuccess)
			reserved -= held[i].size;
	empty_cache();
	printf("event=summary requests=%ld cuda_malloc=%ld cache_hits=%ld oom_retries=%ld denied=%ld peak_reserved=%llu "
	       "reserved=%llu\n",
	       requests, mallocs, hits, oom_retries, denied, (unsigned long long)peak_reserved,
	       (unsigned long long)reserved);
	free(held);
	return unexpected || reserved != 0 ? 1 : 0;
}
