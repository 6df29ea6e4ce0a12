/*
 * The launch gate (gate.c): every kernel launch route passes it. When this
 * process's session is not throttled on any GPU (the GPU is not contended,
 * the session has no share, or there is no compute page) it costs one load
 * of the session's throttle word on the compute page gpusliced maps; no
 * system call, no lock, no allocation.
 */
#ifndef GPUSLICE_GATE_H
#define GPUSLICE_GATE_H

#include "gs.h"

/* The session's throttle word on the compute page, or a word that is always 0. */
extern const uint64_t *gs_gate_word GS_LOCAL;

/* The slow path: waits while the session is throttled on the current
 * context's GPU (and the page is fresh). */
void gs_gate_wait(void);

/* Maps the compute page gpusliced handed over at ATTACH (fd, read-only;
 * -1: none) and follows the session's slot on it (after each successful
 * attach). */
void gs_gate_attach(int fd, uint32_t slot, uint64_t gen);

GS_INLINE void gs_gate(void)
{
	const uint64_t *w = gs_gate_word;
	if (GS_UNLIKELY(!GS_IS_ZERO(*w)))
		gs_gate_wait();
}

#endif
