/*
 * Programs with --api driver|runtime: the same step through either API.
 * Return codes are the API's own (0 success; 2 is out-of-memory in both).
 */
#ifndef GPUSLICE_EXAMPLES_DUALAPI_H
#define GPUSLICE_EXAMPLES_DUALAPI_H

#include <stdint.h>
#include <stdio.h>

#include "drvctx.h"
#include "rtctx.h"

static inline const char *ex_api_errname(int use_driver, int rc)
{
	return use_driver ? ex_cu_name((CUresult)rc) : cudaGetErrorName((cudaError_t)rc);
}

/* Makes device N current (for the driver, its primary context, stored in
 * *ctx when ctx is not NULL). 0 on success; otherwise prints event=error
 * op=init and returns the error. */
static inline int ex_api_setup(int use_driver, int device, CUcontext *ctx)
{
	return use_driver ? ex_driver_setup(device, ctx) : ex_runtime_setup(device);
}

/* For another thread: makes ctx (driver) or device (runtime) current. */
static inline int ex_api_bind(int use_driver, CUcontext ctx, int device)
{
	return use_driver ? (int)cuCtxSetCurrent(ctx) : (int)cudaSetDevice(device);
}

static inline int ex_api_alloc(int use_driver, void **p, uint64_t size)
{
	if (use_driver) {
		CUdeviceptr d = 0;
		int r = (int)cuMemAlloc(&d, size);
		*p = (void *)(uintptr_t)d;
		return r;
	}
	return (int)cudaMalloc(p, size);
}

static inline int ex_api_free(int use_driver, void *p)
{
	return use_driver ? (int)cuMemFree((CUdeviceptr)(uintptr_t)p) : (int)cudaFree(p);
}

static inline int ex_api_meminfo(int use_driver, size_t *free_b, size_t *total)
{
	return use_driver ? (int)cuMemGetInfo(free_b, total) : (int)cudaMemGetInfo(free_b, total);
}

#endif
