/*
 * static_runtime: linked against libcudart_static.a the way nvcc links by
 * default, so no libcudart.so is involved; the runtime inside still dlopens
 * libcuda.so.1 and resolves the driver through cuGetProcAddress_v2.
 *
 *   static_runtime [--step SIZE] [--count N] [--device N]
 *
 * Output:
 *   event=start runtime_version=12060 driver_version=12060 devices=1
 *   event=meminfo when=before free=... total=...
 *   event=alloc index=1 bytes=... status=allowed|denied [error=...]
 *   event=copy bytes=4096 status=ok
 *   event=summary allowed=N denied=M
 * Exit status: 0 when it ran as designed, 1 on an unexpected CUDA error, 2 on bad usage.
 */
#include "common.h"

#include "cuda_runtime_api.h"

static const char *usage = "[--step SIZE] [--count N] [--device N]";

int main(int argc, char **argv)
{
	uint64_t step = 64ull << 20;
	long count = 4, device = 0;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--step"))) {
			if (ex_parse_size(v, &step) || step < 4096)
				EX_USAGE(argv[0], usage, "bad --step %s (at least 4096)", v);
		} else if ((v = ex_opt(argc, argv, &i, "--count"))) {
			if (ex_parse_long(v, 0, 100000, &count))
				EX_USAGE(argv[0], usage, "bad --count %s", v);
		} else if ((v = ex_opt(argc, argv, &i, "--device"))) {
			if (ex_parse_long(v, 0, 1024, &device))
				EX_USAGE(argv[0], usage, "bad --device %s", v);
		} else {
			EX_USAGE(argv[0], usage, "unknown argument %s", argv[i]);
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rtv = 0, drv = 0, n = 0;
	cudaRuntimeGetVersion(&rtv);
	cudaDriverGetVersion(&drv);
	cudaError_t e = cudaGetDeviceCount(&n);
	printf("event=start runtime_version=%d driver_version=%d devices=%d pid=%d\n", rtv, drv, n, (int)getpid());
	if (e != cudaSuccess || (e = cudaSetDevice((int)device)) != cudaSuccess) {
		printf("event=error op=init error=%s\n", cudaGetErrorName(e));
		return 1;
	}
	size_t free_b = 0, total = 0;
	if ((e = cudaMemGetInfo(&free_b, &total)) != cudaSuccess) {
		printf("event=error op=meminfo error=%s\n", cudaGetErrorName(e));
		return 1;
	}
	printf("event=meminfo when=before free=%zu total=%zu\n", free_b, total);
	void **ptrs = calloc((size_t)count + 1, sizeof(void *));
	long allowed = 0, denied = 0;
	int unexpected = 0;
	for (long i = 0; i < count; i++) {
		void *p = NULL;
		e = cudaMalloc(&p, step);
		if (e == cudaSuccess) {
			ptrs[allowed++] = p;
			printf("event=alloc index=%ld bytes=%llu status=allowed\n", i + 1, (unsigned long long)step);
		} else if (e == cudaErrorMemoryAllocation) {
			denied++;
			printf("event=alloc index=%ld bytes=%llu status=denied error=%s\n", i + 1, (unsigned long long)step,
			       cudaGetErrorName(e));
		} else {
			printf("event=alloc index=%ld bytes=%llu status=error error=%s\n", i + 1, (unsigned long long)step,
			       cudaGetErrorName(e));
			unexpected = 1;
			break;
		}
	}
	if (allowed > 0) { /* a round trip through device memory */
		char in[4096], out[4096];
		for (int i = 0; i < 4096; i++)
			in[i] = (char)(i * 7);
		memset(out, 0, sizeof(out));
		e = cudaMemcpy(ptrs[0], in, sizeof(in), cudaMemcpyHostToDevice);
		if (e == cudaSuccess)
			e = cudaMemcpy(out, ptrs[0], sizeof(out), cudaMemcpyDeviceToHost);
		int same = e == cudaSuccess && memcmp(in, out, sizeof(in)) == 0;
		printf("event=copy bytes=4096 status=%s\n", same ? "ok" : "mismatch");
		unexpected |= !same;
	}
	for (long i = 0; i < allowed; i++)
		if ((e = cudaFree(ptrs[i])) != cudaSuccess) {
			printf("event=error op=free error=%s\n", cudaGetErrorName(e));
			unexpected = 1;
		}
	printf("event=summary allowed=%ld denied=%ld\n", allowed, denied);
	free(ptrs);
	return unexpected;
}
