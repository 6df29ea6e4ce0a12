/*
 * gs_exec: allocates device memory, then replaces itself with another
 * program without freeing it (exec), as a launcher script or a framework's
 * re-exec does.
 *
 *   gs_exec SIZE PROGRAM [ARG...]
 *
 * SIZE is in bytes with an optional K/M/G suffix (powers of 1024). Prints
 * "held bytes=N pid=P" once the allocation succeeded, then execs PROGRAM.
 * Exits 1 when the allocation or the exec fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda.h"

static unsigned long long parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	switch (*end) {
	case 'G':
		v <<= 10; /* fall through */
	case 'M':
		v <<= 10; /* fall through */
	case 'K':
		v <<= 10;
		break;
	default:
		break;
	}
	return v;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gs_exec SIZE PROGRAM [ARG...]\n");
		return 2;
	}
	unsigned long long n = parse_size(argv[1]);
	CUcontext ctx;
	CUdeviceptr p;
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(&ctx, 0);
	if (r == CUDA_SUCCESS)
		r = cuCtxSetCurrent(ctx);
	if (r == CUDA_SUCCESS)
		r = cuMemAlloc_v2(&p, (size_t)n);
	if (r != CUDA_SUCCESS) {
		printf("error step=alloc code=%d\n", (int)r);
		return 1;
	}
	printf("held bytes=%llu pid=%d\n", n, (int)getpid());
	fflush(stdout);
	execv(argv[2], argv + 2);
	perror("gs_exec: exec");
	return 1;
}
