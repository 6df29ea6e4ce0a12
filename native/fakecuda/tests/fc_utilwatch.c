/*
 * fc_utilwatch: what NVML says each process got of GPU 0 over a window:
 * polls nvmlDeviceGetProcessUtilization and adds up every new sample
 * (percent of a sample period: 100 ms, or FAKECUDA_NVML_SAMPLE_NS as the
 * timeline was made with) per pid.
 *
 * FC_UTILWATCH_GPU=N watches GPU N (NVML's index) instead.
 *
 *   fc_utilwatch SECONDS     prints event=busy pid=P ms=M per process,
 *                            then event=window ms=<the samples' span>
 *                            samples=<sample periods seen>
 *
 * samples counts the distinct sample timestamps: over a window of busy
 * GPU it tells which sample period the timeline was made with.
 */
#include "common.h"
#include "nvml.h"

#include <dlfcn.h>

#define MAXP 256
#define MAXT 4096
#define MAXS 2048 /* samples NVML keeps: 32 of each of 64 processes (fakecuda) */
#define SEEN (1u << 17) /* (pid, stamp) pairs counted: 64 processes x 10 samples/s x 200 s */

/* Whether the sample (pid, stamp) was counted already; marks it counted. */
static int counted(unsigned pid, unsigned long long stamp)
{
	static struct {
		unsigned long long stamp;
		unsigned pid;
	} seen[SEEN];
	unsigned long long h = (stamp * 0x9E3779B97F4A7C15ULL) ^ ((unsigned long long)pid * 0xC2B2AE3D27D4EB4FULL);
	for (unsigned i = 0; i < SEEN; i++) {
		unsigned k = (unsigned)((h >> 32) + i) & (SEEN - 1);
		if (seen[k].pid == 0) {
			seen[k].pid = pid ? pid : 1;
			seen[k].stamp = stamp;
			return 0;
		}
		if (seen[k].pid == (pid ? pid : 1) && seen[k].stamp == stamp)
			return 1;
	}
	return 1; /* full: count nothing more */
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	double secs = argc > 1 ? atof(argv[1]) : 10;
	const char *pe = getenv("FAKECUDA_NVML_SAMPLE_NS");
	double period_ms = pe && atof(pe) > 0 ? atof(pe) / 1e6 : 100;
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (h == NULL)
		return 2;
	nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
	nvmlReturn_t (*get)(unsigned, nvmlDevice_t *) =
		(nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	nvmlReturn_t (*procs)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long) =
		(nvmlReturn_t(*)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *,
				 unsigned long long))dlsym(h, "nvmlDeviceGetProcessUtilization");
	nvmlDevice_t d;
	const char *gi = getenv("FC_UTILWATCH_GPU");
	unsigned gpu = gi ? (unsigned)atoi(gi) : 0;
	if (!init || !get || !procs || init() != NVML_SUCCESS || get(gpu, &d) != NVML_SUCCESS)
		return 2;
	/* Every poll reads all the samples NVML keeps (lastSeenTimeStamp 0)
	 * and counts those it has not counted: a sample is its (pid, stamp).
	 * Reading on from the newest stamp seen would count nothing after the
	 * node's clock went back (fc_clockstep). It starts after the samples
	 * that exist now. */
	static nvmlProcessUtilizationSample_t s[MAXS];
	unsigned n = MAXS;
	if (procs(d, s, &n, 0) == NVML_SUCCESS)
		for (unsigned i = 0; i < n; i++)
			counted(s[i].pid, s[i].timeStamp);
	unsigned pid[MAXP] = {0};
	double ms[MAXP] = {0};
	unsigned np = 0;
	unsigned long long first = 0, last = 0;
	static unsigned long long stamps[MAXT];
	unsigned nstamps = 0;
	struct timespec ts = {0, 50000000};
	for (int k = 0; k < (int)(secs * 20); k++) {
		nanosleep(&ts, NULL);
		n = MAXS;
		if (procs(d, s, &n, 0) != NVML_SUCCESS)
			continue;
		for (unsigned i = 0; i < n; i++) {
			if (counted(s[i].pid, s[i].timeStamp))
				continue;
			unsigned j;
			for (j = 0; j < np && pid[j] != s[i].pid; j++)
				;
			if (j == np && np < MAXP)
				pid[np++] = s[i].pid;
			if (j < MAXP)
				ms[j] += s[i].smUtil * period_ms / 100;
			unsigned k2;
			for (k2 = 0; k2 < nstamps && stamps[k2] != s[i].timeStamp; k2++)
				;
			if (k2 == nstamps && nstamps < MAXT)
				stamps[nstamps++] = s[i].timeStamp;
			if (first == 0 || s[i].timeStamp < first)
				first = s[i].timeStamp;
			if (s[i].timeStamp > last)
				last = s[i].timeStamp;
		}
	}
	for (unsigned j = 0; j < np; j++)
		printf("event=busy pid=%u ms=%.0f\n", pid[j], ms[j]);
	printf("event=window ms=%.0f samples=%u\n", first ? (double)(last - first) / 1000 + period_ms : 0, nstamps);
	return 0;
}
