/*
 * alloc_storm: many threads allocating and freeing at once. Each thread keeps
 * up to --hold live allocations (a ring: the oldest is freed to make room,
 * and also after a denial, so a thread that alone exceeds the device keeps
 * churning instead of being denied forever),
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
#include "dualapi.h"

static long iters = 10000, hold = 4, device = 0;
static uint64_t size = 1 << 20;
static int use_driver = 1;
static CUcontext ctx;

struct result {
	long ok, denied, errors;
};

static int do_alloc(void **p)
{
	return ex_api_alloc(use_driver, p, size);
}

static int do_free(void *p)
{
	return ex_api_free(use_driver, p);
}

static void *worker(void *arg)
{
	struct result *res = arg;
	void **ring = calloc((size_t)hold, sizeof(void *));
	long n = 0, head = 0;
	if (ex_api_bind(use_driver, ctx, (int)device) != 0) {
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
		} else if (r == EX_OOM) {
			res->denied++;
			if (n > 0) {
				if (do_free(ring[head]) != 0)
					res->errors++;
				head = (head + 1) % hold;
				n--;
			}
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
	const struct ex_option opts[] = {
		{"--threads", EX_LONG, &threads, 1, 1024, NULL},
		{"--iters", EX_LONG, &iters, 1, 1000000000, NULL},
		{"--hold", EX_LONG, &hold, 1, 100000, NULL},
		{"--size", EX_SIZE, &size, 1, 0, NULL},
		EX_DEVICE_OPTION(device),
		{"--api", EX_API, &use_driver, 0, 0, NULL},
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start threads=%ld iters=%ld size=%llu hold=%ld api=%s pid=%d\n", threads, iters,
	       (unsigned long long)size, hold, use_driver ? "driver" : "runtime", (int)getpid());
	if (ex_api_setup(use_driver, (int)device, &ctx))
		return 1;
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
	if (ex_api_meminfo(use_driver, &free_b, &total_b) == 0)
		ex_print_meminfo("after", free_b, total_b);
	else
		total.errors++;
	free(tid);
	free(res);
	return total.errors ? 1 : 0;
}
