/*
 * Kernel launches: every route passes the launch gate (gate.h) before the
 * driver sees it; nothing else is done with a launch.
 */
#include "gate.h"

#define GS_GATED(sym, params, args)                                    \
	CUresult sym params                                             \
	{                                                               \
		gs_pfn_##sym real = GS_REAL(sym);                       \
		if (GS_UNLIKELY(real == NULL))                          \
			return CUDA_ERROR_NOT_INITIALIZED;              \
		gs_gate();                                              \
		return real args;                                       \
	}

#define GS_LAUNCH_PARAMS                                                                                   \
	(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, \
	 unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
#define GS_COOP_PARAMS                                                                                     \
	(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, \
	 unsigned int bz, unsigned int shmem, CUstream s, void **params)

GS_GATED(cuLaunchKernel, GS_LAUNCH_PARAMS, (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))
GS_GATED(cuLaunchKernel_ptsz, GS_LAUNCH_PARAMS, (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))
GS_GATED(cuLaunchCooperativeKernel, GS_COOP_PARAMS, (f, gx, gy, gz, bx, by, bz, shmem, s, params))
GS_GATED(cuLaunchCooperativeKernel_ptsz, GS_COOP_PARAMS, (f, gx, gy, gz, bx, by, bz, shmem, s, params))
GS_GATED(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
	 (config, f, params, extra))
GS_GATED(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
	 (config, f, params, extra))
GS_GATED(cuLaunchCooperativeKernelMultiDevice, (void *list, unsigned int ndev, unsigned int flags),
	 (list, ndev, flags))
GS_GATED(cuLaunch, (CUfunction f), (f))
GS_GATED(cuLaunchGrid, (CUfunction f, int w, int h), (f, w, h))
GS_GATED(cuLaunchGridAsync, (CUfunction f, int w, int h, CUstream s), (f, w, h, s))
