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

static long allowed, denied;
static int unexpected;

static void report(const char *api, long i, uint64_t size, CUresult r)
{
	if (r == CUDA_SUCCESS) {
		allowed++;
		printf("event=alloc api=%s index=%ld bytes=%llu status=allowed\n", api, i + 1, (unsigned long long)size);
	} else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
		denied++;
		printf("event=alloc api=%s index=%ld bytes=%llu status=denied error=%s\n", api, i + 1,
		       (unsigned long long)size, ex_cu_name(r));
	} else {
		unexpected = 1;
		printf("event=alloc api=%s index=%ld bytes=%llu status=error error=%s\n", api, i + 1,
		       (unsigned long long)size, ex_cu_name(r));
	}
}

int main(int argc, char **argv)
{
	uint64_t size = 64ull << 20;
	long count = 4, device = 0;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--size"))) {
			if (ex_parse_size(v, &size) || size == 0)
				EX_USAGE(argv[0], usage, "bad --size %s", v);
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
			unexpected = 1;
		}
	if ((r = cuStreamSynchronize(s)) != CUDA_SUCCESS || (r = cuMemPoolDestroy(mine)) != CUDA_SUCCESS ||
	    (r = cuStreamDestroy(s)) != CUDA_SUCCESS) {
		printf("event=error op=teardown error=%s\n", ex_cu_name(r));
		unexpected = 1;
	}
	printf("event=summary allowed=%ld denied=%ld\n", allowed, denied);
	free(ptrs);
	return unexpected;
}
