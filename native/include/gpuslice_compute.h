/*
 * gpuslice's compute page: <runtime_dir>/compute, written by gpusliced
 * (daemon/compute), mapped read-only by every attached process (the
 * interceptor's launch gate, native/interceptor/gate.c). docs/compute-share.md
 * says what the words mean; daemon/compute/page.go holds
 * the same layout.
 *
 *   header            64 bytes
 *   session[4096]     128 bytes each: the session's throttle word, the
 *                     slot's generation, the session's name
 *
 * throttle: bit g set = the session must not launch on the GPU at index g
 * of its ledger (docs/ledger.md) for now. 0 whenever the session is alone
 * on its GPUs, has no share or the GPU is not contended: the gate's one
 * load. heartbeat: bumped by gpusliced at each pass; a gate that sees it
 * still for GS_COMPUTE_STALE_NS ignores the throttle (a daemon that is gone
 * never stops a job).
 */
#ifndef GPUSLICE_COMPUTE_H
#define GPUSLICE_COMPUTE_H

#include <stdint.h>

#define GS_COMPUTE_MAGIC 0x50435347u /* "GSCP" */
#define GS_COMPUTE_VERSION 1u
#define GS_COMPUTE_SESSIONS 4096
#define GS_COMPUTE_NAME 64
#define GS_COMPUTE_STALE_NS 2000000000LL

struct gs_compute_hdr {
	uint32_t magic, version;
	uint32_t nsessions, pad;
	uint64_t heartbeat;
	uint8_t pad2[40];
};

struct gs_compute_sess {
	uint64_t throttle;
	uint64_t gen;
	char name[GS_COMPUTE_NAME];
	uint8_t pad[48];
};

#define GS_COMPUTE_SIZE (sizeof(struct gs_compute_hdr) + GS_COMPUTE_SESSIONS * sizeof(struct gs_compute_sess))

#endif
