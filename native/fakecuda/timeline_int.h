/*
 * The timeline's shared layout and the helpers its files share
 * (timeline.c: the file, the schedule, submission and waiting;
 * timeline_query.c: launch durations and NVML's figures). Internal.
 */
#ifndef FC_TIMELINE_INT_H
#define FC_TIMELINE_INT_H

#include "fc_internal.h"
#include "timeline.h"

#define TL_MAGIC 0x544c4346u /* "FCLT" */
#define TL_VERSION 1u
#define TL_CTX 64    /* processes with work on one GPU at a time */
#define TL_RING 1024 /* kernels one process can have queued on one GPU */
#define TL_SAMPLES 32

struct tl_ctx {
	_Atomic uint32_t pid; /* 0: free */
	uint32_t mslot;      /* its slot in the memory state (liveness); UINT32_MAX: none */
	uint64_t start;      /* process start time: which process of that pid */
	uint64_t submitted;  /* last sequence number queued */
	uint64_t done;       /* last sequence number completed */
	uint64_t head_left;  /* ns left of kernel done + 1 */
	uint64_t busy;       /* ns it held the GPU */
	uint64_t period_busy; /* ns in the present sample period */
	uint32_t nsamp;      /* samples written (ring index nsamp % TL_SAMPLES) */
	uint32_t pad2;
	struct { uint64_t t_us; uint64_t busy_ns; } samp[TL_SAMPLES];
	uint64_t dur[TL_RING]; /* durations, by seq % TL_RING */
	uint64_t end[TL_RING]; /* completion times, by seq % TL_RING */
};

struct tl_dev {
	pthread_mutex_t lock; /* robust, process-shared */
	uint64_t now;         /* simulated up to (CLOCK_MONOTONIC ns) */
	uint64_t busy;        /* ns busy since creation */
	uint64_t slice_left;  /* of the process holding the GPU */
	uint32_t cur;         /* index of the process holding the GPU */
	uint32_t last_pct;    /* busy percent of the last full sample period */
	uint64_t period_start, period_busy;
	uint64_t last_reap;   /* when dead processes were last looked for */
	struct tl_ctx ctx[TL_CTX];
};

struct tl_shm {
	uint32_t magic, version;
	uint64_t slice_ns;
	int64_t realtime_off; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns, at creation */
	uint64_t sample_ns;   /* NVML's sample period (0 in a file made before it was kept: 100 ms) */
	_Atomic int64_t clock_step_ns; /* steps of the node's wall clock since, ns (fc_clockstep) */
	uint8_t pad[4096 - 40];
	struct tl_dev dev[FC_MAX_DEVICES];
};

extern struct tl_shm *fc_tl; /* the mapped timeline; NULL when it could not be made */

/* NVML's sample period of the mapped timeline, ns. */
static inline uint64_t tl_sample_ns(void)
{
	return fc_tl->sample_ns ? fc_tl->sample_ns : FC_TL_SAMPLE_NS;
}

/* Device phys's timeline, locked (mapping the file on first use); NULL when
 * there is none. */
FC_HIDDEN struct tl_dev *fc_tl_lock(unsigned phys);
FC_HIDDEN void fc_tl_unlock(struct tl_dev *d);
/* Runs the locked device's GPU up to the present. */
FC_HIDDEN void fc_tl_advance_now(struct tl_dev *d);
/* A positive integer environment setting (ns), else dflt. */
FC_HIDDEN uint64_t fc_tl_env_ns(const char *name, uint64_t dflt);
/* /proc/<pid>/stat's start time (0 when unreadable). */
FC_HIDDEN uint64_t fc_tl_proc_start(pid_t pid);

#endif
