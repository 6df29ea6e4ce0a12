/*
 * Driver entry points NVIDIA's CUDA runtime calls while it starts up and the
 * rest of fakecuda had no reason to model.
 */
#include "drv.h"

#include <stdlib.h>
#include <string.h>

/* CUmoduleLoadingMode */
enum { FC_MODULE_EAGER_LOADING = 1, FC_MODULE_LAZY_LOADING = 2 };

/* The driver reads CUDA_MODULE_LOADING (EAGER or LAZY) at cuInit; since CUDA
 * 12.2 lazy loading is the default. The runtime asks this once and then loads
 * its fat binaries either all at context creation or on first use. */
FC_API CUresult cuModuleGetLoadingMode(int *mode)
{
	FC_CHECK_INIT();
	if (mode == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const char *v = getenv("CUDA_MODULE_LOADING");
	*mode = v != NULL && strcmp(v, "EAGER") == 0 ? FC_MODULE_EAGER_LOADING : FC_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}
