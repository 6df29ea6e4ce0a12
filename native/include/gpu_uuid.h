/*
 * A GPU's UUID as NVML and nvidia-smi write it,
 * "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex), from the 16
 * bytes cuDeviceGetUuid gives. Shared by fakecuda, the interceptor and
 * gpuslice-ctxprobe.
 */
#ifndef GPUSLICE_GPU_UUID_H
#define GPUSLICE_GPU_UUID_H

#include <stdio.h>

#define GPU_UUID_TEXT_LEN 41 /* with the NUL */

static inline void gpu_uuid_format(const unsigned char b[16], char *out, size_t len)
{
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

#endif
