/*
 * Streams, events, modules and launches. Everything is synchronous: work
 * "enqueued" on a stream has completed when the call returns, host callbacks
 * run at once, and kernels are accepted without running any code.
 */
#include "drv.h"
#include "modimage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct CUstream_st {
	uint32_t magic;
	CUcontext ctx;
	unsigned flags;
	int priority;
	unsigned long long id;
};

struct CUevent_st {
	uint32_t magic;
	CUcontext ctx;
	unsigned flags;
	bool recorded;
	struct timespec when;
};

struct CUmod_st {
	uint32_t magic;
	CUcontext ctx;
	struct fc_modimage *image; /* its globals (NULL: none known) */
};

struct CUfunc_st {
	uint32_t magic;
	CUmodule mod;
	char name[128];
	int attrs[CU_FUNC_ATTRIBUTE_MAX];
	CUfunc_cache cache;
};

static _Atomic unsigned long long next_stream_id = 3; /* 0..2: null, legacy, per-thread */

CUcontext fc_stream_ctx(CUstream s, CUresult *err)
{
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		CUcontext c = fc_tls_ctx;
		if (!fc_ctx_valid(c)) {
			*err = CUDA_ERROR_INVALID_CONTEXT;
			return NULL;
		}
		return c;
	}
	if (s->magic != FC_MAGIC_STREAM || !fc_ctx_valid(s->ctx)) {
		*err = CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	return s->ctx;
}

/* ---- streams ---- */
FC_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	FC_REQUIRE_CTX(c);
	if (phStream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->ctx = c;
	s->flags = flags;
	s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	s->id = atomic_fetch_add(&next_stream_id, 1);
	s->magic = FC_MAGIC_STREAM;
	*phStream = s;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return cuStreamCreateWithPriority(phStream, Flags, 0);
}

FC_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	FC_CHECK_INIT();
	if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
	    hStream->magic != FC_MAGIC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	hStream->magic = FC_MAGIC_DEAD; /* kept readable: a stale handle reads as invalid */
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamDestroy(CUstream hStream)
{
	return cuStreamDestroy_v2(hStream);
}

#define STREAM_OP(s)                                      \
	FC_CHECK_INIT();                                  \
	CUresult err_ = CUDA_SUCCESS;                     \
	CUcontext sctx_ = fc_stream_ctx((s), &err_);      \
	if (sctx_ == NULL)                                \
		return err_;                              \
	(void)sctx_

FC_API CUresult cuStreamSynchronize(CUstream hStream)
{
	STREAM_OP(hStream);
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamQuery(CUstream hStream)
{
	STREAM_OP(hStream);
	return CUDA_SUCCESS;
}

static bool event_valid(CUevent e)
{
	return e != NULL && e->magic == FC_MAGIC_EVENT;
}

FC_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	STREAM_OP(hStream);
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	STREAM_OP(hStream);
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = (hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD) ? hStream->flags : 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	STREAM_OP(hStream);
	if (priority == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = (hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD) ? hStream->priority : 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	STREAM_OP(hStream);
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = sctx_;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	STREAM_OP(hStream);
	if (streamId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (hStream == NULL || hStream == CU_STREAM_LEGACY)
		*streamId = 1;
	else if (hStream == CU_STREAM_PER_THREAD)
		*streamId = 2;
	else
		*streamId = hStream->id;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	STREAM_OP(hStream);
	if (callback == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	callback(hStream, CUDA_SUCCESS, userData);
	return CUDA_SUCCESS;
}

FC_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	STREAM_OP(hStream);
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	fn(userData);
	return CUDA_SUCCESS;
}

FC_PT_WRAP(CUresult, cuStreamSynchronize, _ptsz, (CUstream s), (s))
FC_PT_WRAP(CUresult, cuStreamQuery, _ptsz, (CUstream s), (s))
FC_PT_WRAP(CUresult, cuStreamWaitEvent, _ptsz, (CUstream s, CUevent e, unsigned int f), (s, e, f))
FC_PT_WRAP(CUresult, cuStreamGetFlags, _ptsz, (CUstream s, unsigned int *f), (s, f))
FC_PT_WRAP(CUresult, cuStreamGetPriority, _ptsz, (CUstream s, int *p), (s, p))
FC_PT_WRAP(CUresult, cuStreamGetCtx, _ptsz, (CUstream s, CUcontext *c), (s, c))
FC_PT_WRAP(CUresult, cuStreamGetId, _ptsz, (CUstream s, unsigned long long *i), (s, i))
FC_PT_WRAP(CUresult, cuStreamAddCallback, _ptsz, (CUstream s, CUstreamCallback cb, void *u, unsigned int f),
	   (s, cb, u, f))
FC_PT_WRAP(CUresult, cuLaunchHostFunc, _ptsz, (CUstream s, CUhostFn fn, void *u), (s, fn, u))

/* ---- events ---- */
FC_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	FC_REQUIRE_CTX(c);
	if (phEvent == NULL ||
	    (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) ||
	    ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->ctx = c;
	e->flags = Flags;
	e->magic = FC_MAGIC_EVENT;
	*phEvent = e;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	STREAM_OP(hStream);
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	clock_gettime(CLOCK_MONOTONIC, &hEvent->when);
	hEvent->recorded = true;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return cuEventRecordWithFlags(hEvent, hStream, 0);
}

FC_PT_WRAP(CUresult, cuEventRecord, _ptsz, (CUevent e, CUstream s), (e, s))
FC_PT_WRAP(CUresult, cuEventRecordWithFlags, _ptsz, (CUevent e, CUstream s, unsigned int f), (e, s, f))

FC_API CUresult cuEventQuery(CUevent hEvent)
{
	FC_CHECK_INIT();
	return event_valid(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuEventSynchronize(CUevent hEvent)
{
	FC_CHECK_INIT();
	return event_valid(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	FC_CHECK_INIT();
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	hEvent->magic = FC_MAGIC_DEAD;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventDestroy(CUevent hEvent)
{
	return cuEventDestroy_v2(hEvent);
}

FC_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	FC_CHECK_INIT();
	if (pMilliseconds == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!event_valid(hStart) || !event_valid(hEnd) || ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) ||
	    !hStart->recorded || !hEnd->recorded)
		return CUDA_ERROR_INVALID_HANDLE;
	double ms = (double)(hEnd->when.tv_sec - hStart->when.tv_sec) * 1e3 +
		    (double)(hEnd->when.tv_nsec - hStart->when.tv_nsec) / 1e6;
	*pMilliseconds = (float)ms;
	return CUDA_SUCCESS;
}

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
			     unsigned bz, unsigned shmem, CUstream s)
{
	STREAM_OP(s);
	if (!func_valid(f))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024 || bz > 64 ||
	    gy > 65535 || gz > 65535)
		return CUDA_ERROR_INVALID_VALUE;
	if (shmem > 166912)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	if (kernelParams != NULL && extra != NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return launch_check(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
			    hStream);
}

FC_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					  unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					  unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					  void **kernelParams)
{
	(void)kernelParams;
	return launch_check(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
			    hStream);
}

FC_PT_WRAP(CUresult, cuLaunchKernel, _ptsz,
	   (CUfunction f, unsigned int a, unsigned int b, unsigned int c, unsigned int d, unsigned int e,
	    unsigned int g, unsigned int h, CUstream s, void **p, void **x),
	   (f, a, b, c, d, e, g, h, s, p, x))
FC_PT_WRAP(CUresult, cuLaunchCooperativeKernel, _ptsz,
	   (CUfunction f, unsigned int a, unsigned int b, unsigned int c, unsigned int d, unsigned int e,
	    unsigned int g, unsigned int h, CUstream s, void **p),
	   (f, a, b, c, d, e, g, h, s, p))
