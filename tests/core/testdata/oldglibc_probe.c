/*
 * Built by TestInterceptorOnOldGlibc against glibc 2.31 (Debian 11,
 * unpacked under build/ by `make old-glibc`) and run with that glibc's
 * ld.so: prints the glibc it runs on, the total memory the driver reports,
 * and how many of six 64 MiB allocations were allowed and denied.
 */
#include <gnu/libc-version.h>
#include <stdio.h>
#include "cuda.h"
int main(void)
{
	CUcontext ctx;
	CUdeviceptr p;
	size_t free_b = 0, total = 0;
	printf("libc version=%s\n", gnu_get_libc_version());
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) {
		printf("error step=init\n");
		return 1;
	}
	cuMemGetInfo(&free_b, &total);
	printf("meminfo total=%zu\n", total);
	int allowed = 0, denied = 0;
	for (int i = 0; i < 6; i++) {
		CUresult r = cuMemAlloc(&p, 64u << 20);
		if (r == CUDA_SUCCESS)
			allowed++;
		else if (r == CUDA_ERROR_OUT_OF_MEMORY)
			denied++;
		else {
			printf("error step=alloc code=%d\n", (int)r);
			return 1;
		}
	}
	printf("summary allowed=%d denied=%d\n", allowed, denied);
	return 0;
}
