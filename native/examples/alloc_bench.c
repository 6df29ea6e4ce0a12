/*
 * alloc_bench: times cuMemAlloc_v2 + cuMemFree_v2 pairs (or cudaMalloc +
 * cudaFree with --api runtime) for `make bench`. Each thread runs its pairs
 * in batches of 1000 and records the time per pair of every batch.
 *
 *   alloc_bench --threads N (--iters M | --ms T) --size BYTES [--api driver|runtime] [--device N]
 *   alloc_bench --paired --iters M --size BYTES [--device N]
 *
 * Output: one JSON line,
 *   {"threads":N,"pairs":P,"ns_per_pair_median":X,"pairs_per_sec":Y}
 * where X is the median over all batches of each thread's median, taken
 * across threads (the median of the per-thread medians). With --iters each
 * thread runs M pairs and Y is P over the time the workers ran: from the
 * first worker's start to the last one's end, each read by the worker
 * itself (a main thread scheduled late on a busy machine would otherwise
 * shorten or stretch the span). With --ms every thread runs until about T
 * milliseconds have passed, and Y counts only the window in which all of
 * them were running: from the last worker's start to the first one's end,
 * the batches that ended in it over its length. The threads that start
 * first or finish last, alone on a core while the others wait or are
 * done, are left out: that tail decides a short run's rate at random.
 * --paired (one thread, driver API) alternates batches of pairs through
 * the cuMemAlloc_v2 and cuMemFree_v2 the program links to (the
 * interceptor's when it is preloaded) with batches through libcuda's own
 * (found with libc's dlsym, which nothing intercepts), in one process, and
 * prints {"pairs":P,"ns_per_pair_linked":A,"ns_per_pair_driver":B,
 * "ns_added_paired":D}: A and B the medians of their batches, D the median
 * of each batch's difference from the driver's batch before it. Without
 * the interceptor both are the driver's (D near 0: the method's control).
 * The machine's speed drifts between processes, not between two batches.
 * Exit status: 0, or 1 if any allocation failed.
 */
#include <pthread.h>

#include "common.h"
#include "dualapi.h"

#define BATCH 1000

static long iters = 100000, device = 0, run_ms = 0;
static int stop; /* --ms: set by the main thread when the time is up */
static uint64_t size = 1 << 20;
static int use_driver = 1;
static CUcontext ctx;
static pthread_barrier_t start;

struct result {
	double median;
	long pairs, failures;
	uint64_t start, end; /* the worker's own clock around its timed pairs */
	uint64_t *ends;      /* --ms: each batch's end, by the same clock */
	long batches;
};

/* --ms: room for the batches of a run of T ms at 10 ns a pair at least */
static long max_batches(void)
{
	return run_ms ? run_ms * 1000000 / (BATCH * 10) + 16 : iters / BATCH;
}

static void *worker(void *arg)
{
	struct result *res = arg;
	long batches = max_batches();
	res->ends = calloc((size_t)batches, sizeof(*res->ends));
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
	long b = 0;
	for (; b < batches && !res->failures; b++) {
		if (run_ms && __atomic_load_n(&stop, __ATOMIC_RELAXED))
			break;
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
		res->ends[b] = ex_now_ns();
		res->pairs += BATCH;
	}
	res->end = b > 0 ? res->ends[b - 1] : res->start;
	res->batches = b;
	if (b > 0) {
		/* each batch's time, from the ends (the window needs them too) */
		uint64_t *per = calloc((size_t)b, sizeof(*per));
		for (long k = 0; k < b; k++)
			per[k] = res->ends[k] - (k > 0 ? res->ends[k - 1] : res->start);
		qsort(per, (size_t)b, sizeof(*per), ex_cmp_u64);
		uint64_t m = b % 2 ? per[b / 2] : (per[b / 2 - 1] + per[b / 2]) / 2;
		res->median = (double)m / BATCH;
		free(per);
	}
	return NULL;
}

/* --ms: pairs per second in the window where every worker was running */
static double window_rate(const struct result *res, long threads)
{
	uint64_t from = 0, to = UINT64_MAX;
	for (long t = 0; t < threads; t++) {
		if (res[t].start > from)
			from = res[t].start;
		if (res[t].end < to)
			to = res[t].end;
	}
	if (to <= from)
		return 0.0;
	long n = 0;
	for (long t = 0; t < threads; t++)
		for (long b = 0; b < res[t].batches; b++)
			n += res[t].ends[b] > from && res[t].ends[b] <= to;
	return (double)n * BATCH / ((double)(to - from) / 1e9);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* --paired: batches alternately through the linked entry points and the
 * driver's own */
static int paired(void)
{
	alloc_fn fa[2] = {cuMemAlloc_v2, (alloc_fn)ex_driver_own("cuMemAlloc_v2")};
	free_fn ff[2] = {cuMemFree_v2, (free_fn)ex_driver_own("cuMemFree_v2")};
	if (fa[1] == NULL || ff[1] == NULL) {
		fprintf(stderr, "alloc_bench: cannot find the loaded libcuda.so.1's own cuMemAlloc_v2/cuMemFree_v2\n");
		return 1;
	}
	long batches = iters / BATCH / 2 * 2;
	uint64_t *t = calloc((size_t)batches, sizeof(*t)), *d = calloc((size_t)batches / 2, sizeof(*d));
	uint64_t *lk = calloc((size_t)batches / 2, sizeof(*lk)), *dv = calloc((size_t)batches / 2, sizeof(*dv));
	long failures = 0;
	for (int k = 0; k < 2; k++) /* warm up both */
		for (int i = 0; i < 100; i++) {
			CUdeviceptr p;
			if (fa[k](&p, size) != CUDA_SUCCESS || ff[k](p) != CUDA_SUCCESS)
				failures++;
		}
	for (long b = 0; b < batches && !failures; b++) {
		int k = (b & 1) == 0; /* the driver's first, then the linked ones */
		alloc_fn a = fa[k];
		free_fn f = ff[k];
		uint64_t t0 = ex_now_ns();
		for (int i = 0; i < BATCH; i++) {
			CUdeviceptr p;
			if (__builtin_expect(a(&p, size) != CUDA_SUCCESS, 0) || __builtin_expect(f(p) != CUDA_SUCCESS, 0))
				failures++;
		}
		t[b] = ex_now_ns() - t0;
	}
	if (failures) {
		fprintf(stderr, "alloc_bench: %ld allocation pairs failed\n", failures);
		return 1;
	}
	/* differences kept signed around 2^63 so that the median sorts them */
	for (long j = 0; j < batches / 2; j++) {
		dv[j] = t[2 * j];
		lk[j] = t[2 * j + 1];
		d[j] = (uint64_t)1 << 63;
		d[j] += lk[j] - dv[j];
	}
	long n = batches / 2;
	qsort(d, (size_t)n, sizeof(*d), ex_cmp_u64);
	qsort(lk, (size_t)n, sizeof(*lk), ex_cmp_u64);
	qsort(dv, (size_t)n, sizeof(*dv), ex_cmp_u64);
	double added = (double)(int64_t)(d[n / 2] - ((uint64_t)1 << 63)) / BATCH;
	printf("{\"pairs\":%ld,\"ns_per_pair_linked\":%.1f,\"ns_per_pair_driver\":%.1f,\"ns_added_paired\":%.2f}\n",
	       batches * BATCH, (double)lk[n / 2] / BATCH, (double)dv[n / 2] / BATCH, added);
	free(t);
	free(d);
	free(lk);
	free(dv);
	return 0;
}

static const char *usage = "--threads N (--iters M | --ms T) --size BYTES [--api driver|runtime] [--device N] | --paired --iters M --size BYTES";

int main(int argc, char **argv)
{
	long threads = 1;
	int pair = 0;
	const struct ex_option opts[] = {
		{"--threads", EX_LONG, &threads, 1, 1024, NULL},
		{"--iters", EX_LONG, &iters, BATCH, 1000000000, "at least " EX_STR(BATCH)},
		{"--ms", EX_LONG, &run_ms, 1, 600000, NULL},
		{"--paired", EX_FLAG, &pair, 0, 0, NULL},
		{"--size", EX_SIZE, &size, 1, 0, NULL},
		EX_DEVICE_OPTION(device),
		{"--api", EX_API, &use_driver, 0, 0, NULL},
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	if (pair) {
		if (threads != 1 || !use_driver || run_ms) {
			fprintf(stderr, "alloc_bench: --paired runs one thread on the driver API for --iters pairs\n");
			return 2;
		}
		if (ex_driver_setup((int)device, &ctx))
			return 1;
		return paired();
	}
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
	if (run_ms) {
		struct timespec ts = {run_ms / 1000, run_ms % 1000 * 1000000};
		while (nanosleep(&ts, &ts) != 0)
			;
		__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	}
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
	double rate = run_ms ? window_rate(res, threads) : wall > 0 ? (double)pairs / wall : 0.0;
	qsort(med, (size_t)threads, sizeof(double), cmp_double);
	double m = threads % 2 ? med[threads / 2] : (med[threads / 2 - 1] + med[threads / 2]) / 2;
	if (failures) {
		fprintf(stderr, "alloc_bench: %ld allocation pairs failed (is the device or quota large enough?)\n",
			failures);
		return 1;
	}
	printf("{\"threads\":%ld,\"pairs\":%ld,\"ns_per_pair_median\":%.1f,\"pairs_per_sec\":%.0f}\n", threads, pairs, m,
	       rate);
	for (long t = 0; t < threads; t++)
		free(res[t].ends);
	free(tid);
	free(res);
	free(med);
	return 0;
}
