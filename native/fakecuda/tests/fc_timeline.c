/*
 * fc_timeline: the modelled GPU time (docs/fakecuda-apis.md, "GPU time").
 *
 *   fc_timeline checks          one process: event=check lines, event=summary
 *   fc_timeline load MS N       queues N kernels of MS ms at once, prints
 *                               event=queued, waits for them and prints
 *                               event=done ms=<modelled time from before the
 *                               first launch to the end of the last>
 *
 * Times are read from events, that is from the model, never from a clock.
 */
#include "common.h"
#include "drvctx.h"
#include "fc_check.h"
#include "cuda_ext.h"
#include "fakecuda_time.h"
#include "nvml.h"

#include <dlfcn.h>
#include <unistd.h>

static CUfunction fn;

/* Queues one kernel of ns nanoseconds on s. */
static CUresult kernel_ns(CUstream s, unsigned long long ns)
{
	void *extra[] = {FAKECUDA_LAUNCH_PARAM_NS, &ns, CU_LAUNCH_PARAM_END};
	return cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra);
}

static float elapsed(CUevent a, CUevent b)
{
	float ms = -1;
	if (cuEventElapsedTime(&ms, a, b) != CUDA_SUCCESS)
		return -1;
	return ms;
}

static int near(float got, float want)
{
	float d = got - want;
	return d > -0.01f && d < 0.01f;
}

/* The busy ms NVML's samples give this process on device 0. */
static double nvml_busy_ms(unsigned *gpu_pct)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (h == NULL)
		return -1;
	nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
	nvmlReturn_t (*get)(unsigned, nvmlDevice_t *) =
		(nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *) =
		(nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(h, "nvmlDeviceGetUtilizationRates");
	nvmlReturn_t (*procs)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long) =
		(nvmlReturn_t(*)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *,
				 unsigned long long))dlsym(h, "nvmlDeviceGetProcessUtilization");
	nvmlDevice_t d;
	nvmlProcessUtilizationSample_t s[64];
	unsigned n = 0;
	nvmlUtilization_t u;
	if (!init || !get || !util || !procs || init() != NVML_SUCCESS || get(0, &d) != NVML_SUCCESS ||
	    util(d, &u) != NVML_SUCCESS)
		return -1;
	*gpu_pct = u.gpu;
	/* the size query answers a fixed 100, as NVIDIA's driver does */
	if (procs(d, NULL, &n, 0) != NVML_ERROR_INSUFFICIENT_SIZE || n != 100)
		return -1;
	n = 64;
	if (procs(d, s, &n, 0) != NVML_SUCCESS || n == 0)
		return -1;
	double ms = 0;
	for (unsigned i = 0; i < n; i++)
		if (s[i].pid == (unsigned)getpid())
			ms += s[i].smUtil; /* percent of 100 ms: ms */
	unsigned none = 64;
	if (procs(d, s, &none, s[n - 1].timeStamp + 1000000000ULL) != NVML_ERROR_NOT_FOUND)
		return -1;
	return ms;
}

static void checks_one(void)
{
	CUstream s;
	CUevent a, b, c;
	cuStreamCreate(&s, 0);
	cuEventCreate(&a, 0);
	cuEventCreate(&b, 0);
	cuEventCreate(&c, 0);

	/* 50 ms kernels back to back: the GPU runs them without a gap */
	check("launch", kernel_ns(s, 50000000ULL) == CUDA_SUCCESS);
	check("query_busy", cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
	cuEventRecord(a, s); /* the end of kernel 1 */
	kernel_ns(s, 50000000ULL);
	kernel_ns(s, 50000000ULL);
	cuEventRecord(b, s); /* the end of kernel 3 */
	check("event_not_ready", cuEventQuery(b) == CUDA_ERROR_NOT_READY);
	float early = 0;
	check("elapsed_not_ready", cuEventElapsedTime(&early, a, b) == CUDA_ERROR_NOT_READY);
	check("event_sync", cuEventSynchronize(b) == CUDA_SUCCESS && cuEventQuery(b) == CUDA_SUCCESS);
	check("elapsed_exact", near(elapsed(a, b), 100.0f));
	check("query_idle", cuStreamQuery(s) == CUDA_SUCCESS);

	/* the grid: 108 SMs x 2 blocks of 1024 threads per wave, 10 us a wave */
	cuEventRecord(a, s);
	cuLaunchKernel(fn, 108 * 2 * 1000, 1, 1, 1024, 1, 1, 0, s, NULL, NULL); /* 1000 waves: 10 ms */
	cuEventRecord(b, s);
	cuStreamSynchronize(s);
	check("grid_model", near(elapsed(a, b), 10.0f) || elapsed(a, b) > 10.0f);

	/* cuLaunchKernelEx and the default stream; cuCtxSynchronize waits for all */
	unsigned long long ns = 20000000ULL;
	void *extra[] = {FAKECUDA_LAUNCH_PARAM_NS, &ns, CU_LAUNCH_PARAM_END};
	CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
			      .blockDimZ = 1, .hStream = s};
	kernel_ns(NULL, 1000000ULL);
	cuEventRecord(a, NULL);
	check("launch_ex", cuLaunchKernelEx(&cfg, fn, NULL, extra) == CUDA_SUCCESS);
	cuEventRecord(c, NULL);
	check("ctx_sync", cuCtxSynchronize() == CUDA_SUCCESS && cuEventQuery(c) == CUDA_SUCCESS &&
				  near(elapsed(a, c), 20.0f));

	/* NVML: after 300 ms of work and a period's idling, its samples hold it */
	cuEventRecord(a, s);
	for (int i = 0; i < 30; i++)
		kernel_ns(s, 10000000ULL);
	cuStreamSynchronize(s);
	usleep(250000);
	unsigned pct = 999;
	double busy = nvml_busy_ms(&pct);
	/* everything this process ran: 150 + 10 + 21 + 300 ms */
	printf("event=nvml busy_ms=%.0f gpu_pct=%u\n", busy, pct);
	check("nvml_process_samples", busy >= 478 && busy <= 485);
	check("nvml_device_idle", pct == 0);
}

static int load(double ms, int n)
{
	CUstream s;
	CUevent a, b;
	cuStreamCreate(&s, 0);
	cuEventCreate(&a, 0);
	cuEventCreate(&b, 0);
	cuEventRecord(a, s);
	for (int i = 0; i < n; i++)
		if (kernel_ns(s, (unsigned long long)(ms * 1e6)) != CUDA_SUCCESS)
			return 1;
	cuEventRecord(b, s);
	printf("event=queued pid=%d\n", (int)getpid());
	fflush(stdout);
	cuEventSynchronize(b);
	printf("event=done ms=%.3f\n", elapsed(a, b));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUmodule mod;
	if (ex_driver_setup(0, NULL) != 0)
		return 2;
	static const char image[] = "fake module";
	if (cuModuleLoadData(&mod, image) != CUDA_SUCCESS || cuModuleGetFunction(&fn, mod, "k") != CUDA_SUCCESS) {
		printf("event=error op=module\n");
		return 2;
	}
	if (argc == 4 && strcmp(argv[1], "load") == 0)
		return load(atof(argv[2]), atoi(argv[3]));
	checks_one();
	return summary();
}
