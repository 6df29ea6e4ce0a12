/*
 * gpuslice session ledger: the shared-memory layout between gpusliced (Go,
 * internal/ledger) and the interceptor (C). docs/ledger.md explains it.
 * Every field is little-endian, naturally aligned; counters are updated with
 * 64-bit atomics only. Changing any offset requires bumping GS_LEDGER_VERSION
 * in both this header and internal/ledger/layout.go; a test compares them.
 */
#ifndef GPUSLICE_LEDGER_H
#define GPUSLICE_LEDGER_H

#include <stdint.h>

#define GS_LEDGER_VERSION 3u
#define GS_LIMITS_MAGIC 0x4D4C5347u   /* "GSLM" */
#define GS_COUNTERS_MAGIC 0x54435347u /* "GSCT" */
#define GS_MAX_GPUS 16
#define GS_UUID_LEN 48     /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL, padded */
#define GS_SESSION_LEN 64  /* session id, NUL-padded */
#define GS_DEFAULT_SLOTS 4096
#define GS_LIMITS_SIZE 4096
#define GS_COUNTERS_HDR_SIZE 4096
#define GS_SLOT_OWNED 8    /* stripes a thread owns alone (0..7); its credit lives there */
#define GS_SLOT_SHARED 8   /* index of the stripe the other threads share (atomics only) */
#define GS_SLOT_STRIPES 9  /* GS_SLOT_OWNED + the shared one */
#define GS_SLOT_SIZE 3136  /* 256-byte head + GS_SLOT_STRIPES * 320 */

/* slot states */
#define GS_SLOT_FREE 0u
#define GS_SLOT_ATTACHED 1u
#define GS_SLOT_RECLAIMING 2u

/* ---- limits file: daemon writes, clients map it PROT_READ from an O_RDONLY fd ---- */
struct gs_limit_gpu {
	char uuid[GS_UUID_LEN]; /* offset 0 */
	uint64_t limit;         /* 48: bytes this session may hold on this GPU */
	uint64_t physical;      /* 56: the GPU's physical memory in bytes */
};                          /* 64 bytes */

struct gs_limits {
	uint32_t magic;      /* 0 */
	uint32_t version;    /* 4 */
	uint32_t ngpus;      /* 8 */
	uint32_t flags;      /* 12: reserved, 0 */
	uint64_t generation; /* 16: bumped (atomically, after the limit stores) on every change */
	uint64_t reserved[5];                   /* 24..63 */
	char session[GS_SESSION_LEN];           /* 64 */
	struct gs_limit_gpu gpu[GS_MAX_GPUS];   /* 128 .. 1152 */
};

/* ---- counters file: mapped read-write by the daemon and every attached process ---- */
struct gs_counter_gpu {
	uint64_t used;       /* 0: bytes currently charged (CAS against limit) */
	uint64_t peak;       /* 8: high-water mark of used (CAS-max) */
	uint64_t denied;     /* 16: number of refused allocations */
	uint64_t reclaimed;  /* 24: bytes given back by the daemon for dead processes */
	uint64_t ctx_cost;   /* 32: what a context costs on this GPU, plus 1, as the session's
	                      * first process to create one there measured it (0: not yet);
	                      * the session's later processes charge it without measuring */
	uint64_t driver;     /* 40: bytes gpusliced charged for memory the driver holds for the
	                      * session's processes beyond what they charged (modules, library
	                      * handles): the sum of its charges on the slots' shared stripes */
	uint64_t settled;    /* 48: audit passes that read the session's processes on this GPU;
	                      * a process that asked for one (SHORT) waits for it to move */
	uint64_t reserved[1];/* 56..63 */
};                       /* 64 bytes, one cache line */

/* What one process holds, spread over stripes so that the threads of a
 * process do not write one shared cache line (docs/ledger.md "Credit").
 * Stripes 0..7 are each owned by one thread at a time, which writes them
 * with plain stores; stripe 8 is shared by the threads that own none and
 * is only changed with atomic adds. Per ledger GPU g:
 *   held[g]  bytes allocated minus bytes released through this stripe
 *            (wrapping: a release may come from another thread than the
 *            allocation; the slot's sum is what the process holds);
 *   lease[g] this stripe's share of gpu[g].used: held plus the credit the
 *            owner keeps (bytes it released but did not give back to used).
 * A sum over a slot above 2^63 means "nothing". raised counts every byte
 * added to a held of the stripe, on any GPU, ever (wrapping): what the
 * slot held between two reads of gpusliced's is at most the first read
 * plus what raised grew by (its driver-memory estimate, docs/ledger.md). */
struct gs_slot_stripe {
	uint32_t busy;              /* 0: owner inside an update (1) or not (0) */
	uint32_t owner;             /* 4: owning thread id, 0 when free */
	uint64_t revoke;            /* 8: non-zero while someone takes the credit back */
	uint64_t raised;            /* 16: bytes added to held[], every GPU (wrapping) */
	uint64_t reserved[5];       /* 24..63 */
	uint64_t held[GS_MAX_GPUS]; /* 64 */
	uint64_t lease[GS_MAX_GPUS];/* 192 */
};                              /* 320 bytes, five cache lines */

struct gs_slot {
	uint32_t pid;        /* 0: owner pid (written by the daemon at attach) */
	uint32_t state;      /* 4: GS_SLOT_* (written by the daemon) */
	uint64_t starttime;  /* 8: /proc/<pid>/stat field 22 of the owner, guards pid reuse */
	uint64_t attach_ns;  /* 16: unix time of attach in ns */
	uint32_t owned;      /* 24: bit k set while owned stripe k has an owner (set after
	                      * the owner's CAS, cleared once its credit is given back):
	                      * the credit scans read no other stripe */
	uint32_t reserved32; /* 28 */
	uint64_t reserved[28]; /* 32..255 */
	struct gs_slot_stripe stripe[GS_SLOT_STRIPES]; /* 256..3135 */
};                       /* 3136 bytes */

struct gs_counters_hdr {
	uint32_t magic;      /* 0 */
	uint32_t version;    /* 4 */
	uint32_t ngpus;      /* 8 */
	uint32_t nslots;     /* 12 */
	uint32_t slot_hwm;   /* 16: slots [0, slot_hwm) have been claimed at least once (daemon
	                      * writes; clients scan no slot past it: a slot never claimed
	                      * is a hole of the memfd, which a read would fill) */
	uint32_t reserved32; /* 20 */
	uint64_t reserved[5];/* 24..63 */
	struct gs_counter_gpu gpu[GS_MAX_GPUS]; /* 64 .. 1088; header padded to 4096 */
};
/* slots start at GS_COUNTERS_HDR_SIZE: slot i at 4096 + i*3136.
 * counters file size = GS_COUNTERS_HDR_SIZE + nslots*GS_SLOT_SIZE. */

/* The credit map, in the header page after struct gs_counters_hdr: bit i
 * (word i/64, bit i%64) set by slot i's process before any of its threads
 * first keeps credit, cleared by the daemon when it frees the slot. The
 * interceptor's credit scans read only the slots marked here, and every
 * slot from GS_CREDIT_MAP_SLOTS on; the daemon never reads it. */
#define GS_CREDIT_MAP_OFF 2048
#define GS_CREDIT_MAP_SLOTS 16384 /* 2048 bytes: up to the end of the header page */
#define GS_CREDIT_MAP(base) ((uint64_t *)((char *)(base) + GS_CREDIT_MAP_OFF))

#define GS_SLOT_AT(base, i) \
	((struct gs_slot *)((char *)(base) + GS_COUNTERS_HDR_SIZE + (uint64_t)(i) * GS_SLOT_SIZE))

_Static_assert(sizeof(struct gs_limit_gpu) == 64, "gs_limit_gpu");
_Static_assert(sizeof(struct gs_limits) == 1152, "gs_limits");
_Static_assert(sizeof(struct gs_counter_gpu) == 64, "gs_counter_gpu");
_Static_assert(sizeof(struct gs_slot_stripe) == 320, "gs_slot_stripe");
_Static_assert(sizeof(struct gs_slot) == GS_SLOT_SIZE, "gs_slot");
_Static_assert(sizeof(struct gs_counters_hdr) == 1088, "gs_counters_hdr");
_Static_assert(GS_CREDIT_MAP_OFF >= sizeof(struct gs_counters_hdr) &&
		       GS_CREDIT_MAP_OFF + GS_CREDIT_MAP_SLOTS / 8 <= GS_COUNTERS_HDR_SIZE,
	       "credit map");

#endif
