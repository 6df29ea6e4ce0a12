/*
 * The profiler control entry points. fakecuda has no profiler to start, so
 * starting and stopping collection succeed and do nothing, as they do on the
 * real driver when no profiler is attached. cuProfilerInitialize (deprecated,
 * takes a configuration file) stays NOT_SUPPORTED.
 */
#include "fc_internal.h"

FC_API CUresult cuProfilerStart(void)
{
	return CUDA_SUCCESS;
}

FC_API CUresult cuProfilerStop(void)
{
	return CUDA_SUCCESS;
}
