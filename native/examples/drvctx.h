/* Driver-API examples: initialize and make device N's primary context current. */
#ifndef GPUSLICE_EXAMPLES_DRVCTX_H
#define GPUSLICE_EXAMPLES_DRVCTX_H

#include <stdio.h>

#include "cuda.h"

static inline const char *ex_cu_name(CUresult r)
{
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
		return "CUDA_ERROR_UNKNOWN";
	return s;
}

/* 0 on success; otherwise prints event=error and returns the CUresult. */
static inline int ex_driver_setup(int device, CUcontext *out)
{
	CUdevice dev;
	CUcontext ctx;
	CUresult r;
	if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&dev, device)) != CUDA_SUCCESS ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
		printf("event=error op=init error=%s\n", ex_cu_name(r));
		return (int)r;
	}
	if (out)
		*out = ctx;
	return 0;
}

#endif
