/* Size parsing for --gpu-mem and plugstack.conf arguments. */
#ifndef GPUSLICE_SPANK_SIZE_H
#define GPUSLICE_SPANK_SIZE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parse a size the way Slurm's --mem does: a whole number with an optional
 * unit K, M, G or T (powers of 1024); a bare number means megabytes. Like
 * internal/size (Go), KiB/MiB/GiB/TiB, KB/MB/GB/TB (also powers of 1024) and
 * B (bytes) are accepted, case-insensitively, and surrounding blanks are
 * ignored. Returns 0 and stores the byte count, or -1 (zero is a valid
 * size here; callers that need a positive value check it).
 */
int gs_parse_size(const char *s, uint64_t *bytes);

/* Render bytes as "8GiB", "1.5GiB", "512MiB", "100B" (like internal/size). */
void gs_format_size(uint64_t bytes, char *buf, size_t len);

#endif
