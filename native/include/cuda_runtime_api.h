/*
 * gpuslice: CUDA runtime API declarations (CUDA 12.6 ABI) for fakecuda's
 * libcudart.so.12 / libcudart_static.a and the example programs.
 *
 * Written for this project: error codes, enum values and exported names
 * match the CUDA 12.6 runtime, for the part of the API that fakecuda models.
 * struct cudaDeviceProp is declared only up to computeMode: those fields have
 * the real layout (a prefix of the real struct), so a program built against
 * the real header still reads them correctly; fakecuda writes nothing beyond.
 */
#ifndef GPUSLICE_CUDA_RUNTIME_API_H
#define GPUSLICE_CUDA_RUNTIME_API_H

#include <stddef.h>

#include "cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDART_VERSION 12060
#define CUDARTAPI

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorCudartUnloading = 4,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidPitchValue = 12,
	cudaErrorInvalidSymbol = 13,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorStubLibrary = 34,
	cudaErrorInsufficientDriver = 35,
	cudaErrorDevicesUnavailable = 46,
	cudaErrorMissingConfiguration = 52,
	cudaErrorInvalidDeviceFunction = 98,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorDeviceNotLicensed = 102,
	cudaErrorInvalidKernelImage = 200,
	cudaErrorDeviceUninitialized = 201,
	cudaErrorAlreadyMapped = 208,
	cudaErrorNotMapped = 211,
	cudaErrorUnsupportedLimit = 215,
	cudaErrorPeerAccessUnsupported = 217,
	cudaErrorInvalidSource = 300,
	cudaErrorFileNotFound = 301,
	cudaErrorOperatingSystem = 304,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalState = 401,
	cudaErrorSymbolNotFound = 500,
	cudaErrorNotReady = 600,
	cudaErrorIllegalAddress = 700,
	cudaErrorLaunchOutOfResources = 701,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorHostMemoryNotRegistered = 713,
	cudaErrorLaunchFailure = 719,
	cudaErrorNotPermitted = 800,
	cudaErrorNotSupported = 801,
	cudaErrorTimeout = 909,
	cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};

enum cudaDriverEntryPointQueryResult {
	cudaDriverEntryPointSuccess = 0,
	cudaDriverEntryPointSymbolNotFound = 1,
	cudaDriverEntryPointVersionNotSufficent = 2
};

#define cudaEnableDefault 0x0
#define cudaEnableLegacyStream 0x1
#define cudaEnablePerThreadDefaultStream 0x2

#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

/* numerically the driver's CUdevice_attribute values */
enum cudaDeviceAttr {
	cudaDevAttrMaxThreadsPerBlock = 1,
	cudaDevAttrWarpSize = 10,
	cudaDevAttrClockRate = 13,
	cudaDevAttrMultiProcessorCount = 16,
	cudaDevAttrPciBusId = 33,
	cudaDevAttrComputeCapabilityMajor = 75,
	cudaDevAttrComputeCapabilityMinor = 76,
	cudaDevAttrManagedMemory = 83,
	cudaDevAttrMemoryPoolsSupported = 115
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
typedef struct CUuuid_st cudaUUID_t;

/* The leading fields of the real struct cudaDeviceProp, in its layout. */
struct cudaDeviceProp {
	char name[256];
	cudaUUID_t uuid;
	char luid[8];
	unsigned int luidDeviceNodeMask;
	size_t totalGlobalMem;
	size_t sharedMemPerBlock;
	int regsPerBlock;
	int warpSize;
	size_t memPitch;
	int maxThreadsPerBlock;
	int maxThreadsDim[3];
	int maxGridSize[3];
	int clockRate;
	size_t totalConstMem;
	int major;
	int minor;
	size_t textureAlignment;
	size_t texturePitchAlignment;
	int deviceOverlap;
	int multiProcessorCount;
	int kernelExecTimeoutEnabled;
	int integrated;
	int canMapHostMemory;
	int computeMode;
};

/* errors */
const char *CUDARTAPI cudaGetErrorName(cudaError_t error);
const char *CUDARTAPI cudaGetErrorString(cudaError_t error);
cudaError_t CUDARTAPI cudaGetLastError(void);
cudaError_t CUDARTAPI cudaPeekAtLastError(void);

/* versions and entry points */
cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion);
cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					      enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						       unsigned long long flags,
						       enum cudaDriverEntryPointQueryResult *driverStatus);

/* devices */
cudaError_t CUDARTAPI cudaGetDeviceCount(int *count);
cudaError_t CUDARTAPI cudaSetDevice(int device);
cudaError_t CUDARTAPI cudaGetDevice(int *device);
cudaError_t CUDARTAPI cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device);
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t CUDARTAPI cudaDeviceSynchronize(void);
cudaError_t CUDARTAPI cudaDeviceReset(void);

/* memory */
cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size);
cudaError_t CUDARTAPI cudaFree(void *devPtr);
cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device);
cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size);
cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t CUDARTAPI cudaFreeHost(void *ptr);
cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				      cudaStream_t stream);
cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				   size_t height, enum cudaMemcpyKind kind);
cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count);
cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

/* streams and events */
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream);
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream);
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);
cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event);
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event);
cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event);

#if !defined(__CUDART_API_VERSION_INTERNAL)
#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
#endif

#ifdef __cplusplus
}
#endif
#endif /* GPUSLICE_CUDA_RUNTIME_API_H */
