/*
 * target_app: allocates device memory in steps and reports each step as
 * allowed or denied; optionally holds what it got for a while before freeing.
 *
 *   target_app [--step SIZE] [--count N] [--api runtime|driver] [--hold SECONDS]
 *              [--device N] [--until-denied] [--exit-without-free]
 *
 * SIGUSR1 ends a --hold early. --exit-without-free leaves the allocations to
 * the process exit (the driver gives them back when the process ends).
 *
 * Output (key=value lines):
 *   event=start api=runtime device=0 step=67108864 count=16
 *   event=meminfo when=before free=... total=...
 *   event=alloc index=1 bytes=67108864 status=allowed ptr=0x...
 *   event=alloc index=9 bytes=67108864 status=denied error=CUDA_ERROR_OUT_OF_MEMORY
 *   event=meminfo when=held free=... total=...
 *   event=free count=8 status=ok
 *   event=summary allowed=8 denied=8 held_bytes=536870912
 * Exit status: 0 when it ran as designed (denials included), 1 on any other
 * CUDA error, 2 on bad usage.
 */
#include "common.h"
#include "dualapi.h"

static const char *usage =
	"[--step SIZE] [--count N] [--api runtime|driver] [--hold SECONDS] [--device N] [--until-denied] "
	"[--exit-without-free]";

static int use_driver;

static const char *errname(int code)
{
	return ex_api_errname(use_driver, code);
}

static int meminfo(const char *when)
{
	size_t free_b = 0, total = 0;
	int rc = ex_api_meminfo(use_driver, &free_b, &total);
	if (rc != 0) {
		printf("event=error op=meminfo error=%s\n", errname(rc));
		return -1;
	}
	ex_print_meminfo(when, free_b, total);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t step = 64ull << 20;
	long count = 16, device = 0;
	double hold = 0;
	int until_denied = 0, no_free = 0;
	const struct ex_option opts[] = {
		{"--step", EX_SIZE, &step, 1, 0, NULL},
		{"--count", EX_LONG, &count, 0, 1000000, NULL},
		EX_DEVICE_OPTION(device),
		{"--api", EX_API, &use_driver, 0, 0, NULL},
		{"--hold", EX_SECONDS, &hold, 0, 0, NULL},
		{"--until-denied", EX_FLAG, &until_denied, 0, 0, NULL},
		{"--exit-without-free", EX_FLAG, &no_free, 0, 0, NULL},
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start api=%s device=%ld step=%llu count=%ld pid=%d\n", use_driver ? "driver" : "runtime", device,
	       (unsigned long long)step, count, (int)getpid());

	if (ex_api_setup(use_driver, (int)device, NULL))
		return 1;
	if (meminfo("before"))
		return 1;

	void **ptrs = calloc((size_t)count + 1, sizeof(void *));
	struct ex_tally t = {0, 0, 0};
	for (long i = 0; i < count; i++) {
		void *p = NULL;
		int rc = ex_api_alloc(use_driver, &p, step);
		if (rc == 0)
			memset(p, 0xA5, step < 4096 ? step : 4096); /* device memory is really there */
		enum ex_status st = ex_report_alloc(&t, NULL, i + 1, step, rc, errname(rc), p);
		if (st == EX_ALLOWED)
			ptrs[t.allowed - 1] = p;
		else if (st == EX_ERROR || until_denied)
			break;
	}
	if (meminfo("held"))
		t.unexpected = 1;
	if (hold > 0) {
		printf("event=hold seconds=%g\n", hold);
		ex_sleep_s(hold);
	}
	if (no_free) {
		printf("event=exit held=%ld status=without_free\n", t.allowed);
		return t.unexpected;
	}
	int free_errors = 0;
	for (long i = 0; i < t.allowed; i++) {
		int rc = ex_api_free(use_driver, ptrs[i]);
		if (rc != 0) {
			free_errors++;
			printf("event=error op=free error=%s\n", errname(rc));
		}
	}
	printf("event=free count=%ld status=%s\n", t.allowed, free_errors ? "error" : "ok");
	if (meminfo("after"))
		t.unexpected = 1;
	printf("event=summary allowed=%ld denied=%ld held_bytes=%llu\n", t.allowed, t.denied,
	       (unsigned long long)(t.allowed * step));
	free(ptrs);
	return t.unexpected || free_errors ? 1 : 0;
}
