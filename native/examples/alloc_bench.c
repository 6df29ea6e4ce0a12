/*
 * alloc_bench: times cuMemAlloc_v2 + cuMemFree_v2 pairs (or cudaMalloc +
 * cudaFree with --api runtime) for `make bench`. Each thread runs its pairs
 * in batches of 1000 and records the time per pair of every batch.
 *
 *   alloc_bench --threads N --iters M --size BYTES [--api driver|runtime] [--device N]
 *
 * Output: one JSON line,
 *   {"threads":N,"pairs":P,"ns_per_pair_median":X,"pairs_per_sec":Y}
 * where X is the median over all batches of each thread's median, taken
 * across threads (the median of the per-thread medians), and Y is P over the
 * time the workers ran: from the first worker's start to the last one's end,
 * each read by the worker itself (a main thread scheduled late on a busy
 * machine would otherwise shorten or stretch the span). Exit status: 0, or
 * 1 if any allocation failed.
 */
#include <pthread.h>

#include "common.h"
#include "dualapi.h"

#define BATCH 1000

static long iters = 100000, device = 0;
static uint64_t size = 1 << 20;
static int use_driver = 1;
static CUcontext ctx;
static pthread_barrier_t start;

struct result {
	double median;
	long pairs, failures;
	uint64_t start, end; /* the worker's own clock around its timed pairs */
};

static void *worker(void *arg)
{
	struct result *res = arg;
	long batches = iters / BATCH;
	uint64_t *per = calloc((size_t)batches, sizeof(*per));
	if (ex_api_bind(use_driver, ctx, (int)device) != 0)
		res->failures++;
	/* warm up: first-touch costs are not what is measured */
	for (int i = 0; i < 100 && !res->failures; i++) {
		void *q;
		if (ex_api_alloc(use_driver, &q, size) != 0 || ex_api_free(use_driver, q) != 0)
			res->failures++;
	}
	pthread_barrier_wait(&start);
	res->start = ex_now_ns();
	for (long b = 0; b < batches && !res->failures; b++) {
		uint64_t t0 = ex_now_ns();
		for (int i = 0; i < BATCH; i++) {
			if (use_driver) {
				CUdeviceptr p;
				if (__builtin_expect(cuMemAlloc(&p, size) != CUDA_SUCCESS, 0) ||
				    __builtin_expect(cuMemFree(p) != CUDA_SUCCESS, 0))
					res->failures++;
			} else {
				void *q;
				if (__builtin_expect(cudaMalloc(&q, size) != cudaSuccess, 0) ||
				    __builtin_expect(cudaFree(q) != cudaSuccess, 0))
					res->failures++;
			}
		}
		per[b] = ex_now_ns() - t0;
		res->pairs += BATCH;
	}
	res->end = ex_now_ns();
	if (batches > 0) {
		qsort(per, (size_t)batches, sizeof(*per), ex_cmp_u64);
		uint64_t m = batches % 2 ? per[batches / 2] : (per[batches / 2 - 1] + per[batches / 2]) / 2;
		res->median = (double)m / BATCH;
	}
	free(per);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static const char *usage = "--threads N --iters M --size BYTES [--api driver|runtime] [--device N]";

int main(int argc, char **argv)
{
	long threads = 1;
	const struct ex_option opts[] = {
		{"--threads", EX_LONG, &threads, 1, 1024, NULL},
		{"--iters", EX_LONG, &iters, BATCH, 1000000000, "at least " EX_STR(BATCH)},
		{"--size", EX_SIZE, &size, 1, 0, NULL},
		EX_DEVICE_OPTION(device),
		{"--api", EX_API, &use_driver, 0, 0, NULL},
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	if (use_driver) {
		if (ex_driver_setup((int)device, &ctx))
			return 1;
	} else if (cudaSetDevice((int)device) != cudaSuccess) {
		fprintf(stderr, "alloc_bench: cudaSetDevice failed\n");
		return 1;
	}
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	struct result *res = calloc((size_t)threads, sizeof(*res));
	for (long t = 0; t < threads; t++)
		pthread_create(&tid[t], NULL, worker, &res[t]);
	pthread_barrier_wait(&start);
	long pairs = 0, failures = 0;
	uint64_t first = UINT64_MAX, last = 0;
	double *med = calloc((size_t)threads, sizeof(double));
	for (long t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		pairs += res[t].pairs;
		failures += res[t].failures;
		med[t] = res[t].median;
		if (res[t].start < first)
			first = res[t].start;
		if (res[t].end > last)
			last = res[t].end;
	}
	double wall = last > first ? (double)(last - first) / 1e9 : 0.0;
	qsort(med, (size_t)threads, sizeof(double), cmp_double);
	double m = threads % 2 ? med[threads / 2] : (med[threads / 2 - 1] + med[threads / 2]) / 2;
	if (failures) {
		fprintf(stderr, "alloc_bench: %ld allocation pairs failed (is the device or quota large enough?)\n",
			failures);
		return 1;
	}
	printf("{\"threads\":%ld,\"pairs\":%ld,\"ns_per_pair_median\":%.1f,\"pairs_per_sec\":%.0f}\n", threads, pairs, m,
	       wall > 0 ? (double)pairs / wall : 0.0);
	free(tid);
	free(res);
	free(med);
	return 0;
}
