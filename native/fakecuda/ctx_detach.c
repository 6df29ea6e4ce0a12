/*
 * cuCtxDetach, the pre-CUDA-4.0 way to let go of a context (pycuda uses it
 * for the contexts it creates): it decrements the usage count that
 * cuCtxCreate set to 1 and cuCtxAttach raised, and destroys the context when
 * the count reaches 0; the context must be current to the calling thread.
 * fakecuda does not model cuCtxAttach (NOT_SUPPORTED), so the count is always
 * 1 and detaching destroys the context, with what cuCtxDestroy frees.
 */
#include "fc_internal.h"

FC_API CUresult cuCtxDetach(CUcontext ctx)
{
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL || ctx != cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	return cuCtxDestroy_v2(ctx);
}
