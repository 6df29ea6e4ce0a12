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

#include "cuda.h"
#include "cuda_runtime_api.h"

static const char *usage =
	"[--step SIZE] [--count N] [--api runtime|driver] [--hold SECONDS] [--device N] [--until-denied] "
	"[--exit-without-free]";

static int use_driver;

static const char *errname(int code)
{
	if (use_driver) {
		const char *s = NULL;
		if (cuGetErrorName((CUresult)code, &s) != CUDA_SUCCESS || s == NULL)
			return "CUDA_ERROR_UNKNOWN";
		return s;
	}
	return cudaGetErrorName((cudaError_t)code);
}

static int meminfo(const char *when)
{
	size_t free_b = 0, total = 0;
	int rc = use_driver ? (int)cuMemGetInfo(&free_b, &total) : (int)cudaMemGetInfo(&free_b, &total);
	if (rc != 0) {
		printf("event=error op=meminfo error=%s\n", errname(rc));
		return -1;
	}
	printf("event=meminfo when=%s free=%zu total=%zu\n", when, free_b, total);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t step = 64ull << 20;
	long count = 16, device = 0;
	double hold = 0;
	int until_denied = 0, no_free = 0;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--step"))) {
			if (ex_parse_size(v, &step) || step == 0)
				EX_USAGE(argv[0], usage, "bad --step %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--count"))) {
			if (ex_parse_long(v, 0, 1000000, &count))
				EX_USAGE(argv[0], usage, "bad --count %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--device"))) {
			if (ex_parse_long(v, 0, 1024, &device))
				EX_USAGE(argv[0], usage, "bad --device %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--api"))) {
			if (strcmp(v, "driver") == 0)
				use_driver = 1;
			else if (strcmp(v, "runtime") != 0)
				EX_USAGE(argv[0], usage, "bad --api %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--hold"))) {
			char *end;
			hold = strtod(v, &end);
			if (*end || hold < 0)
				EX_USAGE(argv[0], usage, "bad --hold %s", v);
		} else if (strcmp(argv[i], "--until-denied") == 0) {
			until_denied = 1;
		} else if (strcmp(argv[i], "--exit-without-free") == 0) {
			no_free = 1;
		} else {
			EX_USAGE(argv[0], usage, "unknown argument %s", argv[i]);
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start api=%s device=%ld step=%llu count=%ld pid=%d\n", use_driver ? "driver" : "runtime", device,
	       (unsigned long long)step, count, (int)getpid());

	int rc;
	if (use_driver) {
		CUdevice dev;
		CUcontext ctx;
		if ((rc = cuInit(0)) != 0 || (rc = cuDeviceGet(&dev, (int)device)) != 0 ||
		    (rc = cuDevicePrimaryCtxRetain(&ctx, dev)) != 0 || (rc = cuCtxSetCurrent(ctx)) != 0) {
			printf("event=error op=init error=%s\n", errname(rc));
			return 1;
		}
	} else if ((rc = cudaSetDevice((int)device)) != 0) {
		printf("event=error op=init error=%s\n", errname(rc));
		return 1;
	}
	if (meminfo("before"))
		return 1;

	void **ptrs = calloc((size_t)count + 1, sizeof(void *));
	long allowed = 0, denied = 0;
	int unexpected = 0;
	for (long i = 0; i < count; i++) {
		void *p = NULL;
		if (use_driver) {
			CUdeviceptr d = 0;
			rc = cuMemAlloc(&d, step);
			p = (void *)(uintptr_t)d;
		} else {
			rc = cudaMalloc(&p, step);
		}
		if (rc == 0) {
			memset(p, 0xA5, step < 4096 ? step : 4096); /* device memory is really there */
			ptrs[allowed++] = p;
			printf("event=alloc index=%ld bytes=%llu status=allowed ptr=%p\n", i + 1, (unsigned long long)step, p);
		} else if (rc == 2) { /* CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation */
			denied++;
			printf("event=alloc index=%ld bytes=%llu status=denied error=%s\n", i + 1, (unsigned long long)step,
			       errname(rc));
			if (until_denied)
				break;
		} else {
			unexpected = 1;
			printf("event=alloc index=%ld bytes=%llu status=error error=%s\n", i + 1, (unsigned long long)step,
			       errname(rc));
			break;
		}
	}
	if (meminfo("held"))
		unexpected = 1;
	if (hold > 0) {
		printf("event=hold seconds=%g\n", hold);
		ex_sleep_s(hold);
	}
	if (no_free) {
		printf("event=exit held=%ld status=without_free\n", allowed);
		return unexpected;
	}
	int free_errors = 0;
	for (long i = 0; i < allowed; i++) {
		rc = use_driver ? (int)cuMemFree((CUdeviceptr)(uintptr_t)ptrs[i]) : (int)cudaFree(ptrs[i]);
		if (rc != 0) {
			free_errors++;
			printf("event=error op=free error=%s\n", errname(rc));
		}
	}
	printf("event=free count=%ld status=%s\n", allowed, free_errors ? "error" : "ok");
	if (meminfo("after"))
		unexpected = 1;
	printf("event=summary allowed=%ld denied=%ld held_bytes=%llu\n", allowed, denied,
	       (unsigned long long)(allowed * step));
	free(ptrs);
	return unexpected || free_errors ? 1 : 0;
}
