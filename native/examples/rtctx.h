/* Runtime-API examples: make device N current. */
#ifndef GPUSLICE_EXAMPLES_RTCTX_H
#define GPUSLICE_EXAMPLES_RTCTX_H

#include <stdio.h>

#include "cuda_runtime_api.h"

/* 0 on success; otherwise prints event=error op=init and returns the error. */
static inline int ex_runtime_setup(int device)
{
	cudaError_t e = cudaSetDevice(device);
	if (e != cudaSuccess) {
		printf("event=error op=init error=%s\n", cudaGetErrorName(e));
		return (int)e;
	}
	return 0;
}

#endif
