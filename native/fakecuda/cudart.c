/*
 * fakecuda's CUDA runtime (libcudart.so.12 and libcudart_static.a), layered
 * like the real one: on first use it dlopens libcuda.so.1, takes
 * cuGetProcAddress_v2 from it with dlsym and resolves every driver entry point
 * it needs through that, asking for CUDA 12.6. It never references a driver
 * symbol directly (and is not linked against libcuda). Each thread works in
 * the primary context of its current device, unless a driver context is
 * already current on it.
 */
#define __CUDART_API_VERSION_INTERNAL 1
#include "cuda_runtime_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define RT_API __attribute__((visibility("default")))
#define RT_VERSION 12060
#define RT_MAX_DEVICES 64

/* (pointer, exported symbol whose type it has, base name looked up) */
#define RT_DRIVER_ENTRIES(X)                                              \
	X(Init, cuInit, "cuInit")                                         \
	X(DriverGetVersion, cuDriverGetVersion, "cuDriverGetVersion")     \
	X(DeviceGetCount, cuDeviceGetCount, "cuDeviceGetCount")           \
	X(DeviceGet, cuDeviceGet, "cuDeviceGet")                          \
	X(DeviceGetName, cuDeviceGetName, "cuDeviceGetName")              \
	X(DeviceGetUuid, cuDeviceGetUuid_v2, "cuDeviceGetUuid")           \
	X(DeviceTotalMem, cuDeviceTotalMem_v2, "cuDeviceTotalMem")        \
	X(DeviceGetAttribute, cuDeviceGetAttribute, "cuDeviceGetAttribute") \
	X(PrimaryRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") \
	X(PrimaryReset, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset") \
	X(CtxGetCurrent, cuCtxGetCurrent, "cuCtxGetCurrent")              \
	X(CtxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent")              \
	X(CtxGetDevice, cuCtxGetDevice, "cuCtxGetDevice")                 \
	X(CtxSynchronize, cuCtxSynchronize, "cuCtxSynchronize")           \
	X(MemAlloc, cuMemAlloc_v2, "cuMemAlloc")                          \
	X(MemFree, cuMemFree_v2, "cuMemFree")                             \
	X(MemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged")        \
	X(MemAllocPitch, cuMemAllocPitch_v2, "cuMemAllocPitch")           \
	X(MemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync")              \
	X(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync") \
	X(MemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync")                 \
	X(DeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool") \
	X(MemGetInfo, cuMemGetInfo_v2, "cuMemGetInfo")                    \
	X(MemAllocHost, cuMemAllocHost_v2, "cuMemAllocHost")              \
	X(MemHostAlloc, cuMemHostAlloc, "cuMemHostAlloc")                 \
	X(MemFreeHost, cuMemFreeHost, "cuMemFreeHost")                    \
	X(Memcpy, cuMemcpy, "cuMemcpy")                                   \
	X(MemcpyHtoD, cuMemcpyHtoD_v2, "cuMemcpyHtoD")                    \
	X(MemcpyDtoH, cuMemcpyDtoH_v2, "cuMemcpyDtoH")                    \
	X(MemcpyDtoD, cuMemcpyDtoD_v2, "cuMemcpyDtoD")                    \
	X(MemcpyAsync, cuMemcpyAsync, "cuMemcpyAsync")                    \
	X(Memcpy2D, cuMemcpy2D_v2, "cuMemcpy2D")                          \
	X(MemsetD8, cuMemsetD8_v2, "cuMemsetD8")                          \
	X(MemsetD8Async, cuMemsetD8Async, "cuMemsetD8Async")              \
	X(StreamCreate, cuStreamCreate, "cuStreamCreate")                 \
	X(StreamDestroy, cuStreamDestroy_v2, "cuStreamDestroy")           \
	X(StreamSynchronize, cuStreamSynchronize, "cuStreamSynchronize")  \
	X(EventCreate, cuEventCreate, "cuEventCreate")                    \
	X(EventRecord, cuEventRecord, "cuEventRecord")                    \
	X(EventSynchronize, cuEventSynchronize, "cuEventSynchronize")     \
	X(EventElapsedTime, cuEventElapsedTime, "cuEventElapsedTime")     \
	X(EventDestroy, cuEventDestroy_v2, "cuEventDestroy")

static struct {
#define X(field, sym, name) __typeof__(sym) *field;
	RT_DRIVER_ENTRIES(X)
#undef X
	PFN_cuGetProcAddress_v12000 getProcAddress;
} drv;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_init_status = cudaSuccess;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[RT_MAX_DEVICES];
static int ndevices;

static __thread int tls_device;       /* the thread's current device */
static __thread cudaError_t tls_error; /* last error */

static cudaError_t from_cu(CUresult r)
{
	if (r == CUDA_SUCCESS)
		return cudaSuccess;
	if ((r >= 1 && r <= 4) || r == 34 || r == 46 || r >= 100)
		return (cudaError_t)r; /* the runtime reuses the driver's numbers here */
	return cudaErrorUnknown;
}

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		tls_error = e;
	return e;
}

static void rt_init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		rt_init_status = cudaErrorInsufficientDriver;
		return;
	}
	drv.getProcAddress = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
	if (drv.getProcAddress == NULL) {
		rt_init_status = cudaErrorInsufficientDriver;
		return;
	}
	CUdriverProcAddressQueryResult st;
#define X(field, sym, name)                                                                                  \
	if (drv.getProcAddress(name, (void **)&drv.field, RT_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) != \
		    CUDA_SUCCESS ||                                                                          \
	    drv.field == NULL) {                                                                             \
		rt_init_status = cudaErrorInsufficientDriver;                                                \
		return;                                                                                      \
	}
	RT_DRIVER_ENTRIES(X)
#undef X
	CUresult r = drv.Init(0);
	if (r != CUDA_SUCCESS) {
		rt_init_status = r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : from_cu(r);
		return;
	}
	r = drv.DeviceGetCount(&ndevices);
	if (r != CUDA_SUCCESS)
		rt_init_status = from_cu(r);
	else if (ndevices == 0)
		rt_init_status = cudaErrorNoDevice;
	if (ndevices > RT_MAX_DEVICES)
		ndevices = RT_MAX_DEVICES;
}

static cudaError_t lazy_init(void)
{
	pthread_once(&rt_once, rt_init);
	return rt_init_status;
}

static cudaError_t primary_of(int dev, CUcontext *out)
{
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= ndevices)
		return cudaErrorInvalidDevice;
	pthread_mutex_lock(&rt_lock);
	CUresult r = CUDA_SUCCESS;
	if (primary[dev] == NULL)
		r = drv.PrimaryRetain(&primary[dev], dev);
	*out = primary[dev];
	pthread_mutex_unlock(&rt_lock);
	return from_cu(r);
}

/* Makes sure the calling thread has a context: its own, or the device's primary. */
static inline cudaError_t ensure_ctx(void)
{
	cudaError_t e = lazy_init();
	if (__builtin_expect(e != cudaSuccess, 0))
		return e;
	CUcontext c = NULL;
	if (__builtin_expect(drv.CtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL, 1))
		return cudaSuccess;
	e = primary_of(tls_device, &c);
	if (e != cudaSuccess)
		return e;
	return from_cu(drv.CtxSetCurrent(c));
}

#define NEED_CTX()                              \
	do {                                    \
		cudaError_t e_ = ensure_ctx();  \
		if (e_ != cudaSuccess)          \
			return ret(e_);         \
	} while (0)

/* ---- errors ---- */
static const struct {
	cudaError_t e;
	const char *name, *text;
} rt_errors[] = {
#define E(c, t) {c, #c, t}
	E(cudaSuccess, "no error"),
	E(cudaErrorInvalidValue, "invalid argument"),
	E(cudaErrorMemoryAllocation, "out of memory"),
	E(cudaErrorInitializationError, "initialization error"),
	E(cudaErrorCudartUnloading, "driver shutting down"),
	E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
	E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
	E(cudaErrorInvalidSymbol, "invalid device symbol"),
	E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
	E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
	E(cudaErrorStubLibrary, "CUDA driver is a stub library"),
	E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
	E(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
	E(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
	E(cudaErrorInvalidDeviceFunction, "invalid device function"),
	E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
	E(cudaErrorInvalidDevice, "invalid device ordinal"),
	E(cudaErrorDeviceNotLicensed, "device doesn't have valid Grid license"),
	E(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
	E(cudaErrorDeviceUninitialized, "invalid device context"),
	E(cudaErrorAlreadyMapped, "resource already mapped"),
	E(cudaErrorNotMapped, "resource not mapped"),
	E(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
	E(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
	E(cudaErrorInvalidSource, "device kernel image is invalid"),
	E(cudaErrorFileNotFound, "file not found"),
	E(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
	E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
	E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
	E(cudaErrorSymbolNotFound, "named symbol not found"),
	E(cudaErrorNotReady, "device not ready"),
	E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
	E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
	E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
	E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
	E(cudaErrorLaunchFailure, "unspecified launch failure"),
	E(cudaErrorNotPermitted, "operation not permitted"),
	E(cudaErrorNotSupported, "operation not supported"),
	E(cudaErrorTimeout, "wait operation timed out"),
	E(cudaErrorUnknown, "unknown error"),
#undef E
};

RT_API const char *cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(rt_errors) / sizeof(rt_errors[0]); i++)
		if (rt_errors[i].e == error)
			return rt_errors[i].name;
	return "cudaErrorUnknown";
}

RT_API const char *cudaGetErrorString(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(rt_errors) / sizeof(rt_errors[0]); i++)
		if (rt_errors[i].e == error)
			return rt_errors[i].text;
	return "unrecognized error code";
}

RT_API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = tls_error;
	tls_error = cudaSuccess;
	return e;
}

RT_API cudaError_t cudaPeekAtLastError(void)
{
	return tls_error;
}

/* ---- versions and entry points ---- */
RT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return ret(cudaErrorInvalidValue);
	pthread_once(&rt_once, rt_init);
	if (drv.DriverGetVersion == NULL) {
		*driverVersion = 0;
		return cudaSuccess;
	}
	return ret(from_cu(drv.DriverGetVersion(driverVersion)));
}

RT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (runtimeVersion == NULL)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = RT_VERSION;
	return cudaSuccess;
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						   unsigned long long flags,
						   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	if (symbol == NULL || funcPtr == NULL)
		return ret(cudaErrorInvalidValue);
	cudaError_t e = lazy_init();
	if (drv.getProcAddress == NULL)
		return ret(e);
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r = drv.getProcAddress(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (driverStatus)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)st;
	if (r == CUDA_ERROR_NOT_FOUND)
		return ret(cudaErrorSymbolNotFound);
	return ret(from_cu(r));
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, RT_VERSION, flags, driverStatus);
}

/* ---- devices ---- */
RT_API cudaError_t cudaGetDeviceCount(int *count)
{
	if (count == NULL)
		return ret(cudaErrorInvalidValue);
	cudaError_t e = lazy_init();
	*count = e == cudaSuccess ? ndevices : 0;
	return ret(e);
}

RT_API cudaError_t cudaSetDevice(int device)
{
	CUcontext c;
	cudaError_t e = primary_of(device, &c);
	if (e != cudaSuccess)
		return ret(e);
	tls_device = device;
	return ret(from_cu(drv.CtxSetCurrent(c)));
}

RT_API cudaError_t cudaGetDevice(int *device)
{
	if (device == NULL)
		return ret(cudaErrorInvalidValue);
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return ret(e);
	CUcontext c = NULL;
	CUdevice d;
	if (drv.CtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL && drv.CtxGetDevice(&d) == CUDA_SUCCESS)
		*device = d;
	else
		*device = tls_device;
	return cudaSuccess;
}

static int attr(CUdevice_attribute a, int dev)
{
	int v = 0;
	(void)drv.DeviceGetAttribute(&v, a, dev);
	return v;
}

RT_API cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device)
{
	if (prop == NULL)
		return ret(cudaErrorInvalidValue);
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return ret(e);
	if (device < 0 || device >= ndevices)
		return ret(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	CUresult r = drv.DeviceGetName(prop->name, sizeof(prop->name), device);
	if (r == CUDA_SUCCESS)
		r = drv.DeviceGetUuid(&prop->uuid, device);
	if (r == CUDA_SUCCESS)
		r = drv.DeviceTotalMem(&prop->totalGlobalMem, device);
	if (r != CUDA_SUCCESS)
		return ret(from_cu(r));
	prop->sharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device);
	prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, device);
	prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
	prop->memPitch = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, device);
	prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
	prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, device);
	prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, device);
	prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, device);
	prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, device);
	prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, device);
	prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, device);
	prop->clockRate = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device);
	prop->totalConstMem = (size_t)attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, device);
	prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
	prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
	prop->textureAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
	prop->texturePitchAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, device);
	prop->deviceOverlap = attr(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, device);
	prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
	prop->kernelExecTimeoutEnabled = attr(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, device);
	prop->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED, device);
	prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
	prop->computeMode = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, device);
	return cudaSuccess;
}

/* the pre-12.0 exported name of the same call */
RT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	return cudaGetDeviceProperties_v2(prop, device);
}

RT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr a, int device)
{
	if (value == NULL)
		return ret(cudaErrorInvalidValue);
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return ret(e);
	return ret(from_cu(drv.DeviceGetAttribute(value, (CUdevice_attribute)a, device)));
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
	NEED_CTX();
	return ret(from_cu(drv.CtxSynchronize()));
}

RT_API cudaError_t cudaDeviceReset(void)
{
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return ret(e);
	int dev = 0;
	(void)cudaGetDevice(&dev);
	return ret(from_cu(drv.PrimaryReset(dev)));
}

/* ---- memory ---- */
RT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	NEED_CTX();
	if (devPtr == NULL)
		return ret(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	CUdeviceptr p = 0;
	CUresult r = drv.MemAlloc(&p, size);
	*devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
	return ret(from_cu(r));
}

RT_API cudaError_t cudaFree(void *devPtr)
{
	NEED_CTX();
	if (devPtr == NULL)
		return cudaSuccess;
	CUresult r = drv.MemFree((CUdeviceptr)(uintptr_t)devPtr);
	return ret(r == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidDevicePointer : from_cu(r));
}

RT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	NEED_CTX();
	if (devPtr == NULL)
		return ret(cudaErrorInvalidValue);
	CUdeviceptr p = 0;
	CUresult r = drv.MemAllocManaged(&p, size, flags);
	*devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
	return ret(from_cu(r));
}

RT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	NEED_CTX();
	if (devPtr == NULL || pitch == NULL)
		return ret(cudaErrorInvalidValue);
	CUdeviceptr p = 0;
	CUresult r = drv.MemAllocPitch(&p, pitch, width, height, 4);
	*devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
	return ret(from_cu(r));
}

RT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	NEED_CTX();
	if (devPtr == NULL)
		return ret(cudaErrorInvalidValue);
	CUdeviceptr p = 0;
	CUresult r = drv.MemAllocAsync(&p, size, hStream);
	*devPtr = r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
	return ret(from_cu(r));
}

RT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	NEED_CTX();
	if (ptr == NULL)
		return ret(cudaErrorInvalidValue);
	CUdeviceptr p = 0;
	CUresult r = drv.MemAllocFromPoolAsync(&p, size, memPool, stream);
	*ptr = r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
	return ret(from_cu(r));
}

RT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	NEED_CTX();
	return ret(from_cu(drv.MemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, hStream)));
}

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t e = lazy_init();
	if (e != cudaSuccess)
		return ret(e);
	return ret(from_cu(drv.DeviceGetDefaultMemPool(memPool, device)));
}

RT_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	NEED_CTX();
	return ret(from_cu(drv.MemGetInfo(free_bytes, total)));
}

RT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	NEED_CTX();
	return ret(from_cu(drv.MemAllocHost(ptr, size)));
}

RT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	NEED_CTX();
	return ret(from_cu(drv.MemHostAlloc(pHost, size, flags)));
}

RT_API cudaError_t cudaFreeHost(void *ptr)
{
	NEED_CTX();
	return ret(from_cu(drv.MemFreeHost(ptr)));
}

static CUresult copy_kind(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
	switch (kind) {
	case cudaMemcpyHostToHost:
	case cudaMemcpyDefault:
		return drv.Memcpy(d, s, count);
	case cudaMemcpyHostToDevice:
		return drv.MemcpyHtoD(d, src, count);
	case cudaMemcpyDeviceToHost:
		return drv.MemcpyDtoH(dst, s, count);
	case cudaMemcpyDeviceToDevice:
		return drv.MemcpyDtoD(d, s, count);
	}
	return (CUresult)-1;
}

RT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	NEED_CTX();
	CUresult r = copy_kind(dst, src, count, kind);
	return ret(r == (CUresult)-1 ? cudaErrorInvalidMemcpyDirection : from_cu(r));
}

RT_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				   cudaStream_t stream)
{
	NEED_CTX();
	if ((unsigned)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	/* all copies complete immediately; the stream is checked by a synchronize */
	CUresult r = drv.StreamSynchronize(stream);
	if (r == CUDA_SUCCESS)
		r = copy_kind(dst, src, count, kind);
	return ret(from_cu(r));
}

RT_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				size_t height, enum cudaMemcpyKind kind)
{
	NEED_CTX();
	if ((unsigned)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	bool src_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyHostToDevice;
	bool dst_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyDeviceToHost;
	c.srcMemoryType = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : src_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
	c.dstMemoryType = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
	c.srcHost = src;
	c.srcDevice = (CUdeviceptr)(uintptr_t)src;
	c.srcPitch = spitch;
	c.dstHost = dst;
	c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	c.Height = height;
	return ret(from_cu(drv.Memcpy2D(&c)));
}

RT_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	NEED_CTX();
	return ret(from_cu(drv.MemsetD8((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count)));
}

RT_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	NEED_CTX();
	return ret(from_cu(drv.MemsetD8Async((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count, stream)));
}

/* ---- streams and events ---- */
RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	NEED_CTX();
	return ret(from_cu(drv.StreamCreate(pStream, flags)));
}

RT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	NEED_CTX();
	return ret(from_cu(drv.StreamDestroy(stream)));
}

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	NEED_CTX();
	return ret(from_cu(drv.StreamSynchronize(stream)));
}

RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	NEED_CTX();
	return ret(from_cu(drv.EventCreate(event, flags)));
}

RT_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

RT_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	NEED_CTX();
	return ret(from_cu(drv.EventRecord(event, stream)));
}

RT_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	NEED_CTX();
	return ret(from_cu(drv.EventSynchronize(event)));
}

RT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	NEED_CTX();
	return ret(from_cu(drv.EventElapsedTime(ms, start, end)));
}

RT_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	NEED_CTX();
	return ret(from_cu(drv.EventDestroy(event)));
}
