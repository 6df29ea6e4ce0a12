/*
 * fc_launcher: a job that launches kernels back to back, as a training loop
 * does: kernels of KERNEL_MS each, at most DEPTH queued ahead of the GPU
 * (it waits on the oldest one's event past that), until killed.
 *
 *   fc_launcher KERNEL_MS DEPTH [GIANT_MS]
 *
 * With GIANT_MS it first launches one kernel of that length. Prints
 * event=ready once its first kernels are queued. The GPU time it gets is
 * read from NVML by another process (fc_utilwatch), never from here.
 *
 * FC_LAUNCH_DIRECT=1: launch through the driver's own cuLaunchKernel,
 * found by its address in the loaded libcuda.so.1 past any interceptor
 * (a job that goes around the launch gate).
 *
 * FC_LAUNCH_PACE_MS=P: sleep P ms after each launch (a job that paces
 * itself to a part of the GPU).
 */
#include "common.h"
#include "drvctx.h"
#include "cuda_ext.h"
#include "fakecuda_time.h"

#define MAX_DEPTH 64

static CUfunction fn;
static CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			  CUstream, void **, void **) = cuLaunchKernel;

static CUresult kernel_ns(unsigned long long ns)
{
	void *extra[] = {FAKECUDA_LAUNCH_PARAM_NS, &ns, CU_LAUNCH_PARAM_END};
	return launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: fc_launcher KERNEL_MS DEPTH [GIANT_MS]\n");
		return 2;
	}
	unsigned long long ns = (unsigned long long)(atof(argv[1]) * 1e6);
	int depth = atoi(argv[2]);
	if (depth < 1 || depth > MAX_DEPTH)
		depth = MAX_DEPTH;
	CUmodule mod;
	static const char image[] = "fake module";
	if (ex_driver_setup(0, NULL) != 0 || cuModuleLoadData(&mod, image) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&fn, mod, "k") != CUDA_SUCCESS) {
		printf("event=error op=setup\n");
		return 2;
	}
	const char *direct = getenv("FC_LAUNCH_DIRECT");
	if (direct != NULL && strcmp(direct, "1") == 0) {
		void *own = ex_driver_own("cuLaunchKernel");
		if (own == NULL) {
			printf("event=error op=direct\n");
			return 2;
		}
		memcpy(&launch, &own, sizeof(launch));
	}
	const char *pace_env = getenv("FC_LAUNCH_PACE_MS");
	double pace_ms = pace_env != NULL ? atof(pace_env) : 0;
	long long pace_ns = (long long)(pace_ms * 1e6);
	struct timespec pace = {(time_t)(pace_ns / 1000000000LL), (long)(pace_ns % 1000000000LL)};
	CUevent ev[MAX_DEPTH];
	for (int i = 0; i < depth; i++)
		cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING);
	if (argc > 3) {
		CUresult r = kernel_ns((unsigned long long)(atof(argv[3]) * 1e6));
		if (r != CUDA_SUCCESS) {
			printf("event=error op=launch error=%s\n", ex_cu_name(r));
			return 1;
		}
	}
	for (unsigned long long n = 0;; n++) {
		CUevent e = ev[n % (unsigned)depth];
		if (n >= (unsigned)depth)
			cuEventSynchronize(e); /* the kernel launched depth ago */
		CUresult r = kernel_ns(ns);
		if (r != CUDA_SUCCESS) {
			printf("event=error op=launch error=%s\n", ex_cu_name(r));
			return 1;
		}
		cuEventRecord(e, NULL);
		if (n + 1 == (unsigned)depth || (pace_ms > 0 && n == 0))
			printf("event=ready pid=%d\n", (int)getpid());
		if (pace_ms > 0)
			nanosleep(&pace, NULL);
	}
}
