/*
 * gpuslice: the CUDA runtime header programs include. fakecuda has no device
 * compiler, so this is the runtime API (cuda_runtime_api.h) and nothing more.
 */
#ifndef GPUSLICE_CUDA_RUNTIME_H
#define GPUSLICE_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#endif /* GPUSLICE_CUDA_RUNTIME_H */
