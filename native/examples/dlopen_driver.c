/*
 * dlopen_driver: what frameworks that do not link the driver do: dlopen
 * libcuda.so.1, resolve a long list of entry points with dlsym at load time
 * (failing if any is missing), then allocate through the resolved pointers.
 *
 *   dlopen_driver [--size SIZE] [--count N] [--device N]
 *
 * Output:
 *   event=resolve requested=108 resolved=108 missing=0
 *   event=missing symbol=cuXxx        (one per missing symbol)
 *   event=alloc index=1 bytes=... status=allowed|denied [error=...]
 *   event=summary allowed=N denied=M
 * Exit status: 0 when every symbol resolved and it ran as designed, 1 otherwise, 2 on bad usage.
 */
#include <dlfcn.h>

#include "common.h"
#include "cuda.h"

static const char *const symbols[] = {
	"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuGetProcAddress",
	"cuGetProcAddress_v2", "cuGetExportTable", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName",
	"cuDeviceGetUuid", "cuDeviceGetUuid_v2", "cuDeviceTotalMem_v2", "cuDeviceGetAttribute",
	"cuDeviceGetPCIBusId", "cuDeviceCanAccessPeer", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
	"cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxReset_v2",
	"cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxSynchronize",
	"cuCtxGetDevice", "cuCtxCreate_v2", "cuCtxDestroy_v2", "cuCtxGetStreamPriorityRange",
	"cuCtxEnablePeerAccess", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged",
	"cuMemAllocHost_v2", "cuMemFreeHost", "cuMemHostAlloc", "cuMemHostRegister_v2", "cuMemHostUnregister",
	"cuMemGetInfo_v2", "cuMemGetAddressRange_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
	"cuMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyPeerAsync", "cuMemcpy2D_v2",
	"cuMemsetD8_v2", "cuMemsetD32_v2", "cuMemsetD8Async", "cuMemAllocAsync", "cuMemFreeAsync",
	"cuMemAllocFromPoolAsync", "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolSetAttribute",
	"cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemAddressReserve",
	"cuMemAddressFree", "cuMemGetAllocationGranularity", "cuMemExportToShareableHandle", "cuStreamCreate",
	"cuStreamCreateWithPriority", "cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamQuery",
	"cuStreamWaitEvent", "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuEventCreate", "cuEventRecord",
	"cuEventSynchronize", "cuEventQuery", "cuEventDestroy_v2", "cuEventElapsedTime", "cuModuleLoadData",
	"cuModuleLoadDataEx", "cuModuleGetFunction", "cuModuleGetGlobal_v2", "cuModuleUnload", "cuLaunchKernel",
	"cuLaunchKernelEx", "cuLinkCreate_v2", "cuLinkAddData_v2", "cuLinkComplete", "cuLinkDestroy",
	"cuFuncGetAttribute", "cuFuncSetAttribute", "cuPointerGetAttribute", "cuPointerGetAttributes",
	"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuGraphCreate", "cuGraphInstantiateWithFlags",
	"cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2",
	"cuTexObjectCreate", "cuLibraryLoadData", "cuKernelGetFunction",
};

static const char *usage = "[--size SIZE] [--count N] [--device N]";

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
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		printf("event=error op=dlopen error=\"%s\"\n", dlerror());
		return 1;
	}
	size_t n = sizeof(symbols) / sizeof(symbols[0]), missing = 0;
	void *fn[sizeof(symbols) / sizeof(symbols[0])];
	for (size_t i = 0; i < n; i++)
		if ((fn[i] = dlsym(h, symbols[i])) == NULL)
			missing++;
	printf("event=resolve requested=%zu resolved=%zu missing=%zu\n", n, n - missing, missing);
	for (size_t i = 0; i < n; i++)
		if (fn[i] == NULL)
			printf("event=missing symbol=%s\n", symbols[i]);
	if (missing)
		return 1;

	__typeof__(cuInit) *init = (__typeof__(cuInit) *)dlsym(h, "cuInit");
	__typeof__(cuDeviceGet) *devget = (__typeof__(cuDeviceGet) *)dlsym(h, "cuDeviceGet");
	__typeof__(cuDevicePrimaryCtxRetain) *retain =
		(__typeof__(cuDevicePrimaryCtxRetain) *)dlsym(h, "cuDevicePrimaryCtxRetain");
	__typeof__(cuCtxSetCurrent) *setcur = (__typeof__(cuCtxSetCurrent) *)dlsym(h, "cuCtxSetCurrent");
	__typeof__(cuMemAlloc_v2) *alloc = (__typeof__(cuMemAlloc_v2) *)dlsym(h, "cuMemAlloc_v2");
	__typeof__(cuMemFree_v2) *mfree = (__typeof__(cuMemFree_v2) *)dlsym(h, "cuMemFree_v2");
	__typeof__(cuGetErrorName) *ename = (__typeof__(cuGetErrorName) *)dlsym(h, "cuGetErrorName");
	CUdevice dev;
	CUcontext ctx;
	CUresult r;
	const char *s = "?";
	if ((r = init(0)) != CUDA_SUCCESS || (r = devget(&dev, (int)device)) != CUDA_SUCCESS ||
	    (r = retain(&ctx, dev)) != CUDA_SUCCESS || (r = setcur(ctx)) != CUDA_SUCCESS) {
		ename(r, &s);
		printf("event=error op=init error=%s\n", s);
		return 1;
	}
	CUdeviceptr *ptrs = calloc((size_t)count + 1, sizeof(*ptrs));
	struct ex_tally t = {0, 0, 0};
	for (long i = 0; i < count; i++) {
		CUdeviceptr p = 0;
		r = alloc(&p, size);
		ename(r, &s);
		enum ex_status st = ex_report_alloc(&t, NULL, i + 1, size, (int)r, s, NULL);
		if (st == EX_ALLOWED)
			ptrs[t.allowed - 1] = p;
		else if (st == EX_ERROR)
			break;
	}
	for (long i = 0; i < t.allowed; i++)
		if (mfree(ptrs[i]) != CUDA_SUCCESS)
			t.unexpected = 1;
	printf("event=summary allowed=%ld denied=%ld\n", t.allowed, t.denied);
	free(ptrs);
	return t.unexpected;
}
