/*
 * attach_bench: time the first charged allocation of a process (which
 * attaches to the session when GPUSLICE_SESSION is set) and a second one.
 * Prints "attach_us=A alloc_us=B rc=R" (A includes the first cuMemAlloc_v2).
 *
 *   attach_bench [BYTES]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr a = 0, b = 0;
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGet(&dev, 0);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r == CUDA_SUCCESS)
		r = cuCtxSetCurrent(ctx);
	if (r != CUDA_SUCCESS) {
		printf("setup rc=%d\n", r);
		return 1;
	}
	double t0 = now_us();
	CUresult r1 = cuMemAlloc_v2(&a, n);
	double t1 = now_us();
	CUresult r2 = cuMemAlloc_v2(&b, n);
	double t2 = now_us();
	if (r1 == CUDA_SUCCESS)
		cuMemFree_v2(a);
	if (r2 == CUDA_SUCCESS)
		cuMemFree_v2(b);
	printf("attach_us=%.1f alloc_us=%.2f rc=%d\n", t1 - t0, t2 - t1, r1 != CUDA_SUCCESS ? r1 : r2);
	return r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS ? 0 : 1;
}
