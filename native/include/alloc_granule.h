/*
 * What a cuMemAlloc takes on the device: the CUDA driver serves a request
 * of more than GS_ALLOC_EXACT_UPTO bytes with a multiple of
 * GS_ALLOC_GRANULE, and packs smaller ones into blocks it sub-allocates.
 * Measured on an H100 (driver 580.159.04, CUDA 13.0; NVML's per-process
 * figure, 64 blocks of each size, docs/real-gpu.md
 * "driver_overhead_within_quota"): 1 MiB + 4 KiB, 1.5 MiB and 2 MiB - 4 KiB
 * took 2 MiB each, 2 MiB + 4 KiB and 3 MiB 4 MiB; 1 MiB, 512 KiB and
 * 64 KiB took exactly their size, 1 MiB - 4 KiB 1 MiB, and 64 blocks of
 * 4 KiB one 2 MiB block. cuMemAllocPitch is served the same way (pitch x
 * height).
 *
 * Shared by fakecuda (what its device gives) and the interceptor (what it
 * charges): a new measurement changes these two lines.
 */
#ifndef GPUSLICE_ALLOC_GRANULE_H
#define GPUSLICE_ALLOC_GRANULE_H

#include <stdint.h>

#define GS_ALLOC_EXACT_UPTO (1ull << 20)
#define GS_ALLOC_GRANULE (2ull << 20)

_Static_assert((GS_ALLOC_GRANULE & (GS_ALLOC_GRANULE - 1)) == 0, "the granule is a power of two");

/* The bytes a cuMemAlloc of n takes: n rounded up to a multiple of
 * GS_ALLOC_GRANULE above GS_ALLOC_EXACT_UPTO; n itself up to that, and
 * from 2^63 on (the compare is signed: no driver gives that much, so n is
 * refused as it stands instead of wrapping to a small charge). An add, a
 * mask, a compare and a select: cuMemAlloc_v2's common path pays them. */
static inline uint64_t gs_alloc_rounded(uint64_t n)
{
	uint64_t r = (n + (GS_ALLOC_GRANULE - 1)) & ~(GS_ALLOC_GRANULE - 1);
	return (int64_t)n > (int64_t)GS_ALLOC_EXACT_UPTO ? r : n;
}

#endif
