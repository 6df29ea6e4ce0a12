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
	const struct ex_option opts[] = {
		{"--step", EX_SIZE, &step, 4096, 0, "at least 4096"},
		{"--count", EX_LONG, &count, 0, 100000, NULL},
		EX_DEVICE_OPTION(device),
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
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
	ex_print_meminfo("before", free_b, total);
	void **ptrs = calloc((size_t)count + 1, sizeof(void *));
	struct ex_tally t = {0, 0, 0};
	for (long i = 0; i < count; i++) {
		void *p = NULL;
		e = cudaMalloc(&p, step);
		enum ex_status st = ex_report_alloc(&t, NULL, i + 1, step, (int)e, cudaGetErrorName(e), NULL);
		if (st == EX_ALLOWED)
			ptrs[t.allowed - 1] = p;
		else if (st == EX_ERROR)
			break;
	}
	if (t.allowed > 0) { /* a round trip through device memory */
		char in[4096], out[4096];
		for (int i = 0; i < 4096; i++)
			in[i] = (char)(i * 7);
		memset(out, 0, sizeof(out));
		e = cudaMemcpy(ptrs[0], in, sizeof(in), cudaMemcpyHostToDevice);
		if (e == cudaSuccess)
			e = cudaMemcpy(out, ptrs[0], sizeof(out), cudaMemcpyDeviceToHost);
		int same = e == cudaSuccess && memcmp(in, out, sizeof(in)) == 0;
		printf("event=copy bytes=4096 status=%s\n", same ? "ok" : "mismatch");
		t.unexpected |= !same;
	}
	for (long i = 0; i < t.allowed; i++)
		if ((e = cudaFree(ptrs[i])) != cudaSuccess) {
			printf("event=error op=free error=%s\n", cudaGetErrorName(e));
			t.unexpected = 1;
		}
	printf("event=summary allowed=%ld denied=%ld\n", t.allowed, t.denied);
	free(ptrs);
	return t.unexpected;
}
