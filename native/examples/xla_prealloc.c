/*
 * xla_prealloc: what XLA (JAX, TensorFlow) does at start-up: ask the driver
 * how much memory is free and preallocate a fraction of it (75 % by default)
 * in one cuMemAlloc, then carve its own allocations out of that block.
 *
 *   xla_prealloc [--fraction F] [--hold SECONDS] [--device N]
 *
 * Output:
 *   event=meminfo when=before free=... total=...
 *   event=prealloc bytes=... fraction=0.75 status=allowed|denied [error=...]
 *   event=meminfo when=held free=... total=...
 *   event=summary prealloc_bytes=... status=allowed|denied
 * Exit status: 0 when it ran as designed (a denied preallocation included),
 * 1 on an unexpected CUDA error, 2 on bad usage.
 */
#include "common.h"
#include "drvctx.h"

static const char *usage = "[--fraction F] [--hold SECONDS] [--device N]";

int main(int argc, char **argv)
{
	double fraction = 0.75, hold = 0;
	long device = 0;
	const struct ex_option opts[] = {
		{"--fraction", EX_FRACTION, &fraction, 0, 0, "0 < F <= 1"},
		{"--hold", EX_SECONDS, &hold, 0, 0, NULL},
		EX_DEVICE_OPTION(device),
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start fraction=%g device=%ld pid=%d\n", fraction, device, (int)getpid());
	if (ex_driver_setup((int)device, NULL))
		return 1;
	size_t free_b = 0, total = 0;
	CUresult r = cuMemGetInfo(&free_b, &total);
	if (r != CUDA_SUCCESS) {
		printf("event=error op=meminfo error=%s\n", ex_cu_name(r));
		return 1;
	}
	ex_print_meminfo("before", free_b, total);
	size_t want = (size_t)((double)free_b * fraction);
	want &= ~(size_t)((2u << 20) - 1); /* XLA rounds to its allocation granularity */
	if (want == 0) {
		printf("event=prealloc bytes=0 fraction=%g status=denied error=NO_FREE_MEMORY\n", fraction);
		printf("event=summary prealloc_bytes=0 status=denied\n");
		return 0;
	}
	CUdeviceptr p = 0;
	r = cuMemAlloc(&p, want);
	const char *status = r == CUDA_SUCCESS ? "allowed" : "denied";
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) {
		printf("event=prealloc bytes=%zu fraction=%g status=error error=%s\n", want, fraction, ex_cu_name(r));
		return 1;
	}
	if (r == CUDA_SUCCESS) {
		printf("event=prealloc bytes=%zu fraction=%g status=allowed ptr=0x%llx\n", want, fraction, p);
		memset((void *)(uintptr_t)p, 0, 4096);
	} else {
		printf("event=prealloc bytes=%zu fraction=%g status=denied error=%s\n", want, fraction, ex_cu_name(r));
	}
	if (cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS)
		ex_print_meminfo("held", free_b, total);
	if (hold > 0) {
		printf("event=hold seconds=%g\n", hold);
		ex_sleep_s(hold);
	}
	if (p && (r = cuMemFree(p)) != CUDA_SUCCESS) {
		printf("event=error op=free error=%s\n", ex_cu_name(r));
		return 1;
	}
	printf("event=summary prealloc_bytes=%zu status=%s\n", p ? want : 0, status);
	return 0;
}
