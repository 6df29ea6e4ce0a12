/*
 * What a cuMemAlloc takes on the device: the CUDA driver serves a request
 * of GS_ALLOC_ROUND_FROM bytes or more with a multiple of GS_ALLOC_GRANULE,
 * and packs smaller ones into blocks it sub-allocates, exactly. Measured
 * on an H100 (driver 580.159.04, CUDA 13.0; NVML's per-process figure):
 * 3 MiB and 2 MiB + 4 KiB blocks took 4 MiB each, 64 KiB blocks packed
 * exactly (8192 of them: 512 MiB). The threshold is an assumption, not
 * measured: between 64 KiB and 2 MiB + 4 KiB. cuMemAllocPitch is served
 * the same way (pitch x height).
 *
 * Shared by fakecuda (what its device gives) and the interceptor (what it
 * charges): a new measurement changes these two lines.
 */
#ifndef GPUSLICE_ALLOC_GRANULE_H
#define GPUSLICE_ALLOC_GRANULE_H

#include <stdint.h>

#define GS_ALLOC_ROUND_FROM (1ull << 20)
#define GS_ALLOC_GRANULE (2ull << 20)

_Static_assert((GS_ALLOC_GRANULE & (GS_ALLOC_GRANULE - 1)) == 0, "the granule is a power of two");

/* The bytes a cuMemAlloc of n takes: n rounded up to a multiple of
 * GS_ALLOC_GRANULE from GS_ALLOC_ROUND_FROM on; n itself below that, and
 * from 2^63 on (the compare is signed: no driver gives that much, so n is
 * refused as it stands instead of wrapping to a small charge). An add, a
 * mask, a compare and a select: cuMemAlloc_v2's common path pays them. */
static inline uint64_t gs_alloc_rounded(uint64_t n)
{
	uint64_t r = (n + (GS_ALLOC_GRANULE - 1)) & ~(GS_ALLOC_GRANULE - 1);
	return (int64_t)n >= (int64_t)GS_ALLOC_ROUND_FROM ? r : n;
}

#endif
