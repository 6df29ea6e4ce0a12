/*
 * Modules, functions and launches. Modules hold no code; a launch is
 * validated and queued on the modelled GPU's timeline (timeline.c) for the
 * time its shape or FAKECUDA_LAUNCH_PARAM_NS gives.
 */
#include "drv.h"
#include "modimage.h"
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct CUmod_st {
	uint32_t magic;
	CUcontext ctx;
	struct fc_modimage *image; /* its globals (NULL: none known) */
	uint64_t bytes;            /* device memory it holds (fc_module_bytes) */
	unsigned phys;
	fc_limtok lim;
};

struct CUfunc_st {
	uint32_t magic;
	CUmodule mod;
	char name[128];
	int attrs[CU_FUNC_ATTRIBUTE_MAX];
	CUfunc_cache cache;
};

/* ---- modules and functions ---- */
static CUresult new_module(CUmodule *module, const void *image)
{
	FC_REQUIRE_CTX(c);
	if (module == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUmod_st *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->ctx = c;
	m->phys = c->phys;
	m->bytes = fc_module_bytes;
	if (m->bytes != 0 && !fc_charge_lim(m->phys, m->bytes, &m->lim)) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->image = fc_modimage_load(image);
	m->magic = FC_MAGIC_MODULE;
	*module = m;
	return CUDA_SUCCESS;
}

FC_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	FC_CHECK_INIT();
	if (fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (access(fname, R_OK) != 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	return new_module(module, NULL);
}

FC_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	FC_CHECK_INIT();
	if (image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return new_module(module, image);
}

FC_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
				   void **optionValues)
{
	FC_CHECK_INIT();
	if (image == NULL || (numOptions && (options == NULL || optionValues == NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	return new_module(module, image);
}

FC_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	FC_CHECK_INIT();
	if (fatCubin == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return new_module(module, fatCubin);
}

static bool module_valid(CUmodule m)
{
	return m != NULL && m->magic == FC_MAGIC_MODULE;
}

FC_API CUresult cuModuleUnload(CUmodule hmod)
{
	FC_CHECK_INIT();
	if (!module_valid(hmod))
		return CUDA_ERROR_INVALID_HANDLE;
	hmod->magic = FC_MAGIC_DEAD;
	if (hmod->bytes != 0)
		fc_uncharge_lim(hmod->phys, hmod->bytes, hmod->lim);
	hmod->bytes = 0;
	fc_modimage_free(hmod->image);
	hmod->image = NULL;
	return CUDA_SUCCESS;
}

FC_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	FC_CHECK_INIT();
	if (hfunc == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(hmod))
		return CUDA_ERROR_INVALID_HANDLE;
	struct CUfunc_st *f = calloc(1, sizeof(*f));
	if (f == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	f->mod = hmod;
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
	f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
	f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 80;
	f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 80;
	f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
	f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
	f->magic = FC_MAGIC_FUNC;
	*hfunc = f;
	return CUDA_SUCCESS;
}

FC_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	FC_CHECK_INIT();
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(hmod))
		return CUDA_ERROR_INVALID_HANDLE;
	return fc_modimage_global(hmod->image, name, dptr, bytes);
}

static bool func_valid(CUfunction f)
{
	return f != NULL && f->magic == FC_MAGIC_FUNC;
}

FC_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	FC_CHECK_INIT();
	if (pi == NULL || (unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!func_valid(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	*pi = hfunc->attrs[attrib];
	return CUDA_SUCCESS;
}

FC_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	FC_CHECK_INIT();
	if ((unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!func_valid(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
	    attrib != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
		return CUDA_ERROR_INVALID_VALUE;
	hfunc->attrs[attrib] = value;
	return CUDA_SUCCESS;
}

FC_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	FC_CHECK_INIT();
	if (!func_valid(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	hfunc->cache = config;
	return CUDA_SUCCESS;
}

static CUresult launch_check(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			     unsigned bz, unsigned shmem)
{
	FC_CHECK_INIT();
	if (!func_valid(f))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024 || bz > 64 ||
	    gy > 65535 || gz > 65535)
		return CUDA_ERROR_INVALID_VALUE;
	if (shmem > 166912)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* Validates a launch and queues it on its stream for its modelled time. */
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       unsigned shmem, CUstream s, void **extra)
{
	CUresult r = launch_check(f, gx, gy, gz, bx, by, bz, shmem);
	if (r == CUDA_SUCCESS)
		r = fc_stream_submit(s, fc_tl_kernel_ns(gx, gy, gz, bx, by, bz, extra));
	return r;
}

FC_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	if (kernelParams != NULL && extra != NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      extra);
}

FC_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					  unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					  unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					  void **kernelParams)
{
	(void)kernelParams;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      NULL);
}

FC_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	if (config == NULL || (kernelParams != NULL && extra != NULL) || (config->numAttrs && config->attrs == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
		      config->blockDimZ, config->sharedMemBytes, config->hStream, extra);
}

FC_PT_WRAP(CUresult, cuLaunchKernel, _ptsz,
	   (CUfunction f, unsigned int a, unsigned int b, unsigned int c, unsigned int d, unsigned int e,
	    unsigned int g, unsigned int h, CUstream s, void **p, void **x),
	   (f, a, b, c, d, e, g, h, s, p, x))
FC_PT_WRAP(CUresult, cuLaunchCooperativeKernel, _ptsz,
	   (CUfunction f, unsigned int a, unsigned int b, unsigned int c, unsigned int d, unsigned int e,
	    unsigned int g, unsigned int h, CUstream s, void **p),
	   (f, a, b, c, d, e, g, h, s, p))
FC_PT_WRAP(CUresult, cuLaunchKernelEx, _ptsz, (const CUlaunchConfig *c, CUfunction f, void **p, void **x),
	   (c, f, p, x))
