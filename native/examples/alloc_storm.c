/*
 * alloc_storm: many threads allocating and freeing at once. Each thread keeps
 * up to --hold live allocations (a ring: the oldest is freed to make room),
 * writes to every block it gets, and counts allowed and denied allocations.
 *
 *   alloc_storm [--threads N] [--iters N] [--size SIZE] [--hold N] [--api driver|runtime] [--device N]
 *
 * Output:
 *   event=start threads=8 iters=10000 size=1048576 api=driver
 *   event=summary threads=8 iters=10000 ok=... denied=... errors=0
 *   event=meminfo when=after free=... total=...     (after every thread freed its blocks)
 * Exit status: 0 when every call returned success or out-of-memory, 1 otherwise, 2 on bad usage.
 */
#include <pthread.h>

#include "common.h"
#include "cuda_runtime_api.h"
#include "drvctx.h"

static long iters = 10000, hold = 4, device = 0;
static uint64_t size = 1 << 20;
static int use_driver = 1;
static CUcontext ctx;

struct result {
	long ok, denied, errors;
};

static int do_alloc(void **p)
{
	if (use_driver) {
		CUdeviceptr d = 0;
		int r = (int)cuMemAlloc(&d, size);
		*p = (void *)(uintptr_t)d;
		return r;
	}
	return (int)cudaMalloc(p, size);
}

static int do_free(void *p)
{
	return use_driver ? (int)cuMemFree((CUdeviceptr)(uintptr_t)p) : (int)cudaFree(p);
}

static void *worker(void *arg)
{
	struct result *res = arg;
	void **ring = calloc((size_t)hold, sizeof(void *));
	long n = 0, head = 0;
	if (use_driver ? cuCtxSetCurrent(ctx) != CUDA_SUCCESS : cudaSetDevice((int)device) != cudaSuccess) {
		res->errors++;
		free(ring);
		return NULL;
	}
	for (long i = 0; i < iters; i++) {
		if (n == hold) {
			if (do_free(ring[head]) != 0)
				res->errors++;
			head = (head + 1) % hold;
			n--;
		}
		void *p = NULL;
		int r = do_alloc(&p);
		if (r == 0) {
			((volatile char *)p)[0] = (char)i;
			ring[(head + n) % hold] = p;
			n++;
			res->ok++;
		} else if (r == 2) {
			res->denied++;
		} else {
			res->errors++;
		}
	}
	while (n > 0) {
		if (do_free(ring[head]) != 0)
			res->errors++;
		head = (head + 1) % hold;
		n--;
	}
	free(ring);
	return NULL;
}

static const char *usage = "[--threads N] [--iters N] [--size SIZE] [--hold N] [--api driver|runtime] [--device N]";

int main(int argc, char **argv)
{
	long threads = 8;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--threads"))) {
			if (ex_parse_long(v, 1, 1024, &threads))
				EX_USAGE(argv[0], usage, "bad --threads %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--iters"))) {
			if (ex_parse_long(v, 1, 1000000000, &iters))
				EX_USAGE(argv[0], usage, "bad --iters %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--hold"))) {
			if (ex_parse_long(v, 1, 100000, &hold))
				EX_USAGE(argv[0], usage, "bad --hold %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--size"))) {
			if (ex_parse_size(v, &size) || size == 0)
				EX_USAGE(argv[0], usage, "bad --size %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--device"))) {
			if (ex_parse_long(v, 0, 1024, &device))
				EX_USAGE(argv[0], usage, "bad --device %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--api"))) {
			if (strcmp(v, "runtime") == 0)
				use_driver = 0;
			else if (strcmp(v, "driver") != 0)
				EX_USAGE(argv[0], usage, "bad --api %s", v);
		} else {
			EX_USAGE(argv[0], usage, "unknown argument %s", argv[i]);
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start threads=%ld iters=%ld size=%llu hold=%ld api=%s pid=%d\n", threads, iters,
	       (unsigned long long)size, hold, use_driver ? "driver" : "runtime", (int)getpid());
	if (use_driver) {
		if (ex_driver_setup((int)device, &ctx))
			return 1;
	} else {
		cudaError_t e = cudaSetDevice((int)device);
		if (e != cudaSuccess) {
			printf("event=error op=init error=%s\n", cudaGetErrorName(e));
			return 1;
		}
	}
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	struct result *res = calloc((size_t)threads, sizeof(*res));
	for (long t = 0; t < threads; t++)
		if (pthread_create(&tid[t], NULL, worker, &res[t]) != 0) {
			printf("event=error op=pthread_create\n");
			return 1;
		}
	struct result total = {0, 0, 0};
	for (long t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		total.ok += res[t].ok;
		total.denied += res[t].denied;
		total.errors += res[t].errors;
	}
	printf("event=summary threads=%ld iters=%ld ok=%ld denied=%ld errors=%ld\n", threads, iters, total.ok,
	       total.denied, total.errors);
	size_t free_b = 0, total_b = 0;
	int rc = use_driver ? (int)cuMemGetInfo(&free_b, &total_b) : (int)cudaMemGetInfo(&free_b, &total_b);
	if (rc == 0)
		printf("event=meminfo when=after free=%zu total=%zu\n", free_b, total_b);
	else
		total.errors++;
	free(tid);
	free(res);
	return total.errors ? 1 : 0;
}
