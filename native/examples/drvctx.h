/* Driver-API examples: initialize and make device N's primary context current. */
#ifndef GPUSLICE_EXAMPLES_DRVCTX_H
#define GPUSLICE_EXAMPLES_DRVCTX_H

#include <dlfcn.h>
#include <stdio.h>

#include "cuda.h"

/* The loaded libcuda.so.1's own definition of name, past any interceptor
 * (which defines dlsym too and comes first in the global scope, so libc's
 * dlsym is looked up in libc.so.6 itself); NULL when not found. For
 * paired measurements: the linked entry point against the driver's. */
static inline void *ex_driver_own(const char *name)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *(*libc_dlsym)(void *, const char *) = NULL;
	if (libc != NULL) {
		libc_dlsym = (void *(*)(void *, const char *))dlvsym(libc, "dlsym", "GLIBC_2.34");
		if (libc_dlsym == NULL)
			libc_dlsym = (void *(*)(void *, const char *))dlvsym(libc, "dlsym", "GLIBC_2.2.5");
	}
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (libc_dlsym == NULL || drv == NULL)
		return NULL;
	return libc_dlsym(drv, name);
}

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
