/*
 * The modelled GPU time (timeline.c): one timeline per physical GPU, shared
 * by every process of the node through /dev/shm/fakecuda-<state>@timeline.
 * Used by the driver (launches, streams, events) and NVML (utilisation).
 */
#ifndef FC_TIMELINE_H
#define FC_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

#define FC_TL_SAMPLE_NS 100000000ULL /* NVML's sample period: 100 ms (FAKECUDA_NVML_SAMPLE_NS) */
#define FC_TL_DEFAULT_SLICE_NS 2000000ULL /* time slice between processes: 2 ms */
#define FC_TL_DEFAULT_WAVE_NS 10000ULL    /* one wave of blocks over the SMs: 10 us */
/* Where the timeline file keeps the steps of the node's wall clock made
 * since it was created (int64_t ns, atomic): NVML stamps its utilisation
 * samples with the wall clock, as NVIDIA's driver stamps them with the
 * host's. One kernel serves every node of the tests, so a node's clock
 * cannot be stepped; fc_clockstep steps the clock its fakecuda stamps with. */
#define FC_TL_CLOCK_STEP_OFF 32

/* How long a kernel of this shape runs, in ns: FAKECUDA_KERNEL_NS when set,
 * else its waves (blocks over 108 SMs x resident blocks per SM) times
 * FAKECUDA_WAVE_NS; `extra` may carry FAKECUDA_LAUNCH_PARAM_NS. */
uint64_t fc_tl_kernel_ns(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			 void **extra);
/* The time a graph launch takes (FAKECUDA_KERNEL_NS, else one wave). */
uint64_t fc_tl_graph_ns(void);

/* Queues ns of work for this process on physical GPU phys and returns its
 * sequence number (0 when the GPU's timeline cannot be used: the work is
 * then complete at once). Blocks while this process has FC_TL_RING kernels
 * queued on the GPU, as a full push buffer does. */
uint64_t fc_tl_submit(unsigned phys, uint64_t ns);
/* This process's last queued sequence number on phys (0: none). */
uint64_t fc_tl_last(unsigned phys);
/* Whether work seq of this process on phys has completed. */
bool fc_tl_done(unsigned phys, uint64_t seq);
/* Waits until work seq of this process on phys has completed. */
void fc_tl_wait(unsigned phys, uint64_t seq);
/* The modelled time (CLOCK_MONOTONIC ns) at which seq completed, once
 * done; for seq 0 (nothing queued) the GPU's present time. */
uint64_t fc_tl_end_time(unsigned phys, uint64_t seq);

/* NVML: percent of the last full sample period the GPU was busy. */
int fc_tl_device_util(unsigned phys, unsigned *gpu_pct);

struct fc_tl_sample {
	uint32_t pid;
	uint32_t sm_pct;       /* percent of the sample period */
	uint64_t time_us;      /* end of the period, CLOCK_REALTIME us */
};
/* NVML: the per-process samples on phys newer than last_seen_us; writes at
 * most max, returns how many exist. */
unsigned fc_tl_process_samples(unsigned phys, uint64_t last_seen_us, struct fc_tl_sample *out, unsigned max);

#ifdef FC_DRV_H
/* Queues ns of work on stream s (stream.c): CUDA_SUCCESS, or the stream's error. */
CUresult fc_stream_submit(CUstream s, uint64_t ns);
#endif

#endif /* FC_TIMELINE_H */
