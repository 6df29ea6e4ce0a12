/*
 * async_pool: the stream-ordered allocator. Allocates with cuMemAllocAsync
 * (the device's default pool) and with cuMemAllocFromPoolAsync (a pool it
 * creates), reports each allocation, then frees everything with
 * cuMemFreeAsync and synchronizes the stream.
 *
 *   async_pool [--size SIZE] [--count N] [--device N]
 *
 * Output:
 *   event=alloc api=cuMemAllocAsync index=1 bytes=... status=allowed|denied [error=...]
 *   event=alloc api=cuMemAllocFromPoolAsync index=1 bytes=... status=allowed|denied [error=...]
 *   event=pool which=default|created used=...
 *   event=summary allowed=N denied=M
 * Exit status: 0 when it ran as designed, 1 on an unexpected CUDA error, 2 on bad usage.
 */
#include "common.h"
#include "drvctx.h"

static const char *usage = "[--size SIZE] [--count N] [--device N]";

static struct ex_tally tally;

static void report(const char *api, long i, uint64_t size, CUresult r)
{
	ex_report_alloc(&tally, api, i + 1, size, (int)r, ex_cu_name(r), NULL);
}

int main(int argc, char **argv)
{
	uint64_t size = 64ull << 20;
	long count = 4, device = 0;
	const struct ex_option opts[] = {
		{"--size", EX_SIZE, &size, 1, 0, NULL},
		{"--count", EX_LONG, &count, 0, 100000, NULL},
		EX_DEVICE_OPTION(device),
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start size=%llu count=%ld device=%ld pid=%d\n", (unsigned long long)size, count, device,
	       (int)getpid());
	if (ex_driver_setup((int)device, NULL))
		return 1;
	CUstream s;
	CUmemoryPool dflt, mine;
	CUresult r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetDefaultMemPool(&dflt, (CUdevice)device);
	CUmemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = (int)device;
	if (r == CUDA_SUCCESS)
		r = cuMemPoolCreate(&mine, &props);
	if (r != CUDA_SUCCESS) {
		printf("event=error op=setup error=%s\n", ex_cu_name(r));
		return 1;
	}
	CUdeviceptr *ptrs = calloc(2 * (size_t)count + 1, sizeof(*ptrs));
	long n = 0;
	for (long i = 0; i < count; i++) {
		CUdeviceptr p = 0;
		r = cuMemAllocAsync(&p, size, s);
		report("cuMemAllocAsync", i, size, r);
		if (r == CUDA_SUCCESS)
			ptrs[n++] = p;
	}
	for (long i = 0; i < count; i++) {
		CUdeviceptr p = 0;
		r = cuMemAllocFromPoolAsync(&p, size, mine, s);
		report("cuMemAllocFromPoolAsync", i, size, r);
		if (r == CUDA_SUCCESS)
			ptrs[n++] = p;
	}
	cuuint64_t used = 0;
	if (cuMemPoolGetAttribute(dflt, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS)
		printf("event=pool which=default used=%llu\n", (unsigned long long)used);
	if (cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS)
		printf("event=pool which=created used=%llu\n", (unsigned long long)used);
	for (long i = 0; i < n; i++)
		if ((r = cuMemFreeAsync(ptrs[i], s)) != CUDA_SUCCESS) {
			printf("event=error op=free error=%s\n", ex_cu_name(r));
			tally.unexpected = 1;
		}
	if ((r = cuStreamSynchronize(s)) != CUDA_SUCCESS || (r = cuMemPoolDestroy(mine)) != CUDA_SUCCESS ||
	    (r = cuStreamDestroy(s)) != CUDA_SUCCESS) {
		printf("event=error op=teardown error=%s\n", ex_cu_name(r));
		tally.unexpected = 1;
	}
	printf("event=summary allowed=%ld denied=%ld\n", tally.allowed, tally.denied);
	free(ptrs);
	return tally.unexpected;
}
