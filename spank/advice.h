/* What to ask next time (advice.c); internal/advice is the same in Go. */
#ifndef GPUSLICE_SPANK_ADVICE_H
#define GPUSLICE_SPANK_ADVICE_H

#include <stddef.h>
#include <stdint.h>

enum gs_advice {
	GS_ADVICE_NONE = 0,  /* the quota fits the job */
	GS_ADVICE_LOWER = 1, /* the peak is well below the quota */
	GS_ADVICE_MORE = 2,  /* the job reached its quota or was refused */
};

/* From the highest peak of the job's GPUs, its quota per GPU and the
 * allocations refused: the advice and the --gpu-mem to ask for (*ask,
 * bytes, 0 with GS_ADVICE_NONE). */
enum gs_advice gs_advise(uint64_t peak, uint64_t quota, uint64_t refused, uint64_t *ask);

/* bytes as a --gpu-mem value: "6G", "1536M" (a multiple of 1 MiB). */
void gs_format_ask(uint64_t bytes, char *buf, size_t len);

#endif
