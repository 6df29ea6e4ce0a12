/*
 * fc_copy: checks that copies and memsets move real bytes: each check writes
 * a pattern, copies it through device memory and reads it back.
 *
 *   event=check name=htod_dtoh status=ok
 *   event=summary checks=N failed=M
 */
#include <dlfcn.h>

#include "common.h"
#include "cuda_runtime_api.h"
#include "drvctx.h"

static int checks, failed;

static void check(const char *name, int ok)
{
	checks++;
	failed += !ok;
	printf("event=check name=%s status=%s\n", name, ok ? "ok" : "mismatch");
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31u + seed);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUcontext ctx;
	if (ex_driver_setup(0, &ctx))
		return 1;
	enum { N = 1 << 16 };
	static unsigned char in[N], out[N];
	CUdeviceptr a, b;
	if (cuMemAlloc(&a, N) || cuMemAlloc(&b, N))
		return 1;

	fill(in, N, 1);
	memset(out, 0, N);
	check("htod_dtoh", !cuMemcpyHtoD(a, in, N) && !cuMemcpyDtoH(out, a, N) && !memcmp(in, out, N));

	fill(in, N, 2);
	memset(out, 0, N);
	check("dtod", !cuMemcpyHtoD(a, in, N) && !cuMemcpyDtoD(b, a, N) && !cuMemcpyDtoH(out, b, N) &&
			      !memcmp(in, out, N));

	fill(in, N, 3);
	memset(out, 0, N);
	check("unified_cumemcpy", !cuMemcpy(a, (CUdeviceptr)(uintptr_t)in, N) &&
					  !cuMemcpy((CUdeviceptr)(uintptr_t)out, a, N) && !memcmp(in, out, N));

	CUstream s;
	fill(in, N, 4);
	memset(out, 0, N);
	check("async_stream", !cuStreamCreate(&s, 0) && !cuMemcpyHtoDAsync(a, in, N, s) &&
				      !cuMemcpyDtoHAsync(out, a, N, s) && !cuStreamSynchronize(s) && !memcmp(in, out, N));

	int ok = !cuMemsetD8(a, 0x5a, N) && !cuMemcpyDtoH(out, a, N);
	for (size_t i = 0; i < N; i++)
		ok &= out[i] == 0x5a;
	check("memset_d8", ok);

	ok = !cuMemsetD16(a, 0xBEEF, N / 2) && !cuMemcpyDtoH(out, a, N);
	for (size_t i = 0; i < N / 2; i++)
		ok &= ((unsigned short *)out)[i] == 0xBEEF;
	check("memset_d16", ok);

	ok = !cuMemsetD32Async(a, 0xCAFEF00Du, N / 4, s) && !cuMemcpyDtoH(out, a, N);
	for (size_t i = 0; i < N / 4; i++)
		ok &= ((unsigned int *)out)[i] == 0xCAFEF00Du;
	check("memset_d32_async", ok);

	/* 2D: a 100x50 block of a host image into a pitched allocation and back */
	CUdeviceptr pitched;
	size_t pitch = 0;
	ok = !cuMemAllocPitch(&pitched, &pitch, 100, 50, 4) && pitch >= 100;
	fill(in, 100 * 50, 5);
	memset(out, 0, N);
	CUDA_MEMCPY2D c2 = {0};
	c2.srcMemoryType = CU_MEMORYTYPE_HOST;
	c2.srcHost = in;
	c2.srcPitch = 100;
	c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c2.dstDevice = pitched;
	c2.dstPitch = pitch;
	c2.WidthInBytes = 100;
	c2.Height = 50;
	ok = ok && !cuMemcpy2D(&c2);
	CUDA_MEMCPY2D back = {0};
	back.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	back.srcDevice = pitched;
	back.srcPitch = pitch;
	back.dstMemoryType = CU_MEMORYTYPE_HOST;
	back.dstHost = out;
	back.dstPitch = 100;
	back.WidthInBytes = 100;
	back.Height = 50;
	ok = ok && !cuMemcpy2D(&back) && !memcmp(in, out, 100 * 50);
	/* the padding between rows was not written: row 1 starts at pitch */
	unsigned char row1[100];
	ok = ok && !cuMemcpyDtoH(row1, pitched + pitch, 100) && !memcmp(row1, in + 100, 100);
	check("memcpy2d_pitched", ok);

	/* 3D: 16x8x4 bytes between host and a device box with padding */
	CUdeviceptr box;
	ok = !cuMemAlloc(&box, 32 * 10 * 4);
	fill(in, 16 * 8 * 4, 6);
	memset(out, 0, N);
	CUDA_MEMCPY3D c3 = {0};
	c3.srcMemoryType = CU_MEMORYTYPE_HOST;
	c3.srcHost = in;
	c3.srcPitch = 16;
	c3.srcHeight = 8;
	c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c3.dstDevice = box;
	c3.dstPitch = 32;
	c3.dstHeight = 10;
	c3.WidthInBytes = 16;
	c3.Height = 8;
	c3.Depth = 4;
	CUDA_MEMCPY3D r3 = c3;
	r3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	r3.srcDevice = box;
	r3.srcPitch = 32;
	r3.srcHeight = 10;
	r3.srcHost = NULL;
	r3.dstMemoryType = CU_MEMORYTYPE_HOST;
	r3.dstHost = out;
	r3.dstDevice = 0;
	r3.dstPitch = 16;
	r3.dstHeight = 8;
	ok = ok && !cuMemcpy3D(&c3) && !cuMemcpy3D(&r3) && !memcmp(in, out, 16 * 8 * 4);
	check("memcpy3d", ok);

	/* arrays */
	CUarray arr;
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 64, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	fill(in, 64 * 16 * 4, 7);
	memset(out, 0, N);
	ok = !cuArrayCreate(&arr, &ad) && !cuMemcpyHtoA(arr, 0, in, 64 * 16 * 4) && !cuMemcpyAtoH(out, arr, 0, 64 * 16 * 4) &&
	     !memcmp(in, out, 64 * 16 * 4) && !cuArrayDestroy(arr);
	check("array_htoa_atoh", ok);

	/* virtual memory: two physical chunks mapped back to back */
	CUmemAllocationProp prop = {0};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	size_t g = 0;
	CUdeviceptr va;
	CUmemGenericAllocationHandle h1, h2;
	CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	ok = !cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) && g > 0 &&
	     !cuMemAddressReserve(&va, 2 * g, 0, 0, 0) && !cuMemCreate(&h1, g, &prop, 0) && !cuMemCreate(&h2, g, &prop, 0) &&
	     !cuMemMap(va, g, 0, h1, 0) && !cuMemMap(va + g, g, 0, h2, 0) && !cuMemSetAccess(va, 2 * g, &acc, 1);
	fill(in, N, 8);
	memset(out, 0, N);
	ok = ok && !cuMemcpyHtoD(va + g - N / 2, in, N) && !cuMemcpyDtoH(out, va + g - N / 2, N) && !memcmp(in, out, N);
	/* the same physical memory seen through a second mapping */
	CUdeviceptr va2;
	ok = ok && !cuMemAddressReserve(&va2, g, 0, 0, 0) && !cuMemMap(va2, g, 0, h2, 0) && !cuMemSetAccess(va2, g, &acc, 1) &&
	     !cuMemcpyDtoH(out, va2, N / 2) && !memcmp(in + N / 2, out, N / 2);
	ok = ok && !cuMemUnmap(va2, g) && !cuMemAddressFree(va2, g) && !cuMemUnmap(va, 2 * g) && !cuMemRelease(h1) &&
	     !cuMemRelease(h2) && !cuMemAddressFree(va, 2 * g);
	check("vmm_map", ok);

	/* per-thread-default-stream entry points do the same work */
	CUresult (*htod_ptds)(CUdeviceptr, const void *, size_t) =
		(CUresult(*)(CUdeviceptr, const void *, size_t))dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds");
	CUresult (*dtoh_ptds)(void *, CUdeviceptr, size_t) =
		(CUresult(*)(void *, CUdeviceptr, size_t))dlsym(RTLD_DEFAULT, "cuMemcpyDtoH_v2_ptds");
	fill(in, N, 9);
	memset(out, 0, N);
	check("ptds_copies", htod_ptds && dtoh_ptds && !htod_ptds(a, in, N) && !dtoh_ptds(out, a, N) && !memcmp(in, out, N));

	/* the runtime on top: cudaMemcpy both ways and cudaMemset */
	void *d = NULL;
	fill(in, N, 10);
	memset(out, 0, N);
	ok = !cudaMalloc(&d, N) && !cudaMemcpy(d, in, N, cudaMemcpyHostToDevice) &&
	     !cudaMemcpy(out, d, N, cudaMemcpyDeviceToHost) && !memcmp(in, out, N);
	ok = ok && !cudaMemset(d, 0x11, N) && !cudaMemcpy(out, d, N, cudaMemcpyDefault);
	for (size_t i = 0; ok && i < N; i++)
		ok &= out[i] == 0x11;
	check("runtime_memcpy_memset", ok && !cudaFree(d));

	cuMemFree(a);
	cuMemFree(b);
	cuMemFree(pitched);
	cuMemFree(box);
	printf("event=summary checks=%d failed=%d\n", checks, failed);
	return failed ? 1 : 0;
}
