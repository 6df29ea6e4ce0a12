/*
 * fc_launchbench: what the launch gate adds to a launch. In one process,
 * batches of cuLaunchKernel alternate between the linked entry point (the
 * interceptor's, when it is preloaded) and the driver's own (found with
 * libc's dlsym, which nothing intercepts). Kernels take 1 ns of modelled
 * GPU time, so the GPU never backs up.
 *
 *   fc_launchbench BATCHES LAUNCHES_PER_BATCH
 *   -> {"launches":N,"ns_linked":A,"ns_driver":B,"ns_added_paired":median(A-B per batch pair)}
 */
#include "common.h"
#include "drvctx.h"
#include "cuda_ext.h"
#include "fakecuda_time.h"


typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			      CUstream, void **, void **);

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int batches = argc > 1 ? atoi(argv[1]) : 200;
	int per = argc > 2 ? atoi(argv[2]) : 2000;
	if (batches < 2 || batches > 100000 || per < 1)
		return 2;
	CUfunction fn;
	CUmodule mod;
	static const char image[] = "fake module";
	if (ex_driver_setup(0, NULL) != 0 || cuModuleLoadData(&mod, image) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&fn, mod, "k") != CUDA_SUCCESS)
		return 2;
	launch_fn f[2] = {cuLaunchKernel, (launch_fn)ex_driver_own("cuLaunchKernel")};
	if (f[1] == NULL)
		return 2;
	unsigned long long ns = 1;
	void *extra[] = {FAKECUDA_LAUNCH_PARAM_NS, &ns, CU_LAUNCH_PARAM_END};
	double *d = calloc((size_t)batches, sizeof(double));
	double tot[2] = {0, 0};
	for (int b = 0; b < batches; b++) {
		double t[2];
		for (int k = 0; k < 2; k++) {
			int which = (b & 1) ? 1 - k : k; /* alternate which goes first */
			double t0 = now_ns();
			for (int i = 0; i < per; i++)
				if (f[which](fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra) != CUDA_SUCCESS)
					return 1;
			t[which] = (now_ns() - t0) / per;
		}
		d[b] = t[0] - t[1];
		tot[0] += t[0];
		tot[1] += t[1];
		cuCtxSynchronize();
	}
	qsort(d, (size_t)batches, sizeof(double), cmp);
	printf("{\"launches\":%lld,\"ns_linked\":%.1f,\"ns_driver\":%.1f,\"ns_added_paired\":%.2f}\n",
	       (long long)batches * per * 2, tot[0] / batches, tot[1] / batches, d[batches / 2]);
	free(d);
	return 0;
}
