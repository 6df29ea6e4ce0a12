/*
 * What the timeline answers beyond the schedule: how long a launch takes
 * (its knob, FAKECUDA_KERNEL_NS, or its grid) and NVML's utilisation
 * figures, read from the sample periods timeline.c closes.
 */
#include "timeline_int.h"
#include "cuda_ext.h"
#include "fakecuda_time.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t kernel_ns_env, wave_ns_env;
static pthread_once_t knob_once = PTHREAD_ONCE_INIT;

static void knobs_load(void)
{
	kernel_ns_env = fc_tl_env_ns("FAKECUDA_KERNEL_NS", 0);
	wave_ns_env = fc_tl_env_ns("FAKECUDA_WAVE_NS", FC_TL_DEFAULT_WAVE_NS);
}

uint64_t fc_tl_kernel_ns(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, void **extra)
{
	for (unsigned i = 0; extra != NULL && i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2)
		if (extra[i] == FAKECUDA_LAUNCH_PARAM_NS && extra[i + 1] != NULL)
			return *(const unsigned long long *)extra[i + 1];
	pthread_once(&knob_once, knobs_load);
	if (kernel_ns_env)
		return kernel_ns_env;
	uint64_t threads = (uint64_t)bx * by * bz;
	uint64_t resident = threads ? 2048 / threads : 1; /* blocks one SM holds: 2048 threads, at most 32 */
	if (resident > 32)
		resident = 32;
	if (resident == 0)
		resident = 1;
	uint64_t per_wave = 108 * resident;
	uint64_t blocks = (uint64_t)gx * gy * gz;
	return (blocks + per_wave - 1) / per_wave * wave_ns_env;
}

uint64_t fc_tl_graph_ns(void)
{
	pthread_once(&knob_once, knobs_load);
	return kernel_ns_env ? kernel_ns_env : wave_ns_env;
}

int fc_tl_device_util(unsigned phys, unsigned *gpu_pct)
{
	struct tl_dev *d = fc_tl_lock(phys);
	if (d == NULL)
		return -1;
	fc_tl_advance_now(d);
	*gpu_pct = d->last_pct;
	fc_tl_unlock(d);
	return 0;
}

unsigned fc_tl_process_samples(unsigned phys, uint64_t last_seen_us, struct fc_tl_sample *out, unsigned max)
{
	struct tl_dev *d = fc_tl_lock(phys);
	if (d == NULL)
		return 0;
	fc_tl_advance_now(d);
	unsigned n = 0;
	for (unsigned i = 0; i < TL_CTX; i++) {
		struct tl_ctx *c = &d->ctx[i];
		uint32_t pid = atomic_load_explicit(&c->pid, memory_order_relaxed);
		if (pid == 0)
			continue;
		uint32_t first = c->nsamp > TL_SAMPLES ? c->nsamp - TL_SAMPLES : 0;
		for (uint32_t k = first; k < c->nsamp; k++) {
			if (c->samp[k % TL_SAMPLES].t_us <= last_seen_us)
				continue;
			if (n < max) {
				out[n].pid = pid;
				out[n].time_us = c->samp[k % TL_SAMPLES].t_us;
				out[n].sm_pct = (uint32_t)((c->samp[k % TL_SAMPLES].busy_ns * 100 + tl_sample_ns() / 2) /
							   tl_sample_ns());
			}
			n++;
		}
	}
	fc_tl_unlock(d);
	return n;
}

uint64_t fc_tl_env_ns(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	if (v == NULL || *v == 0)
		return dflt;
	char *end;
	unsigned long long n = strtoull(v, &end, 10);
	return (*end == 0 && n > 0 && n <= 3600ULL * 1000000000ULL) ? n : dflt;
}

uint64_t fc_tl_proc_start(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long long v = 0;
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				&v) != 1)
		return 0;
	return v;
}
