/* The refusal line on stderr (notice.c). */
#ifndef GPUSLICE_NOTICE_H
#define GPUSLICE_NOTICE_H

#include <stdint.h>

/* The quota refused n bytes on ledger GPU g (claim: an allocation; 0: a
 * context's cost): one line on stderr, rate-limited. Slow side only. */
void gs_notice_refused(int g, uint64_t n, int claim) __attribute__((cold));
/* In a child after fork: its own count of lines. */
void gs_notice_fork(void);

#endif
