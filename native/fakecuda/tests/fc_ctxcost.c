/*
 * fc_ctxcost: every context costs device memory (FAKECUDA_CTX_BYTES), given
 * back when the context goes. One event=step line per step with the device's
 * free memory (cuMemGetInfo) afterwards; then event=hold until SIGUSR1 with
 * the primary context and one created context alive (for NVML's view).
 *
 *   event=step name=NAME result=R free=BYTES
 */
#include "common.h"
#include "drvctx.h"
#include "cuda_ext.h"

static CUdevice dev;
static CUcontext probe_ctx; /* kept current to ask cuMemGetInfo */

static void step(const char *name, CUresult r)
{
	size_t f = 0, t = 0;
	CUcontext cur = NULL;
	cuCtxGetCurrent(&cur);
	cuCtxSetCurrent(probe_ctx);
	cuMemGetInfo(&f, &t);
	cuCtxSetCurrent(cur);
	printf("event=step name=%s result=%d free=%zu total=%zu\n", name, (int)r, f, t);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUresult r = cuInit(0);
	printf("event=init result=%d pid=%d\n", (int)r, (int)getpid());
	if (r != CUDA_SUCCESS)
		return 0;
	cuDeviceGet(&dev, 0);
	r = cuDevicePrimaryCtxRetain(&probe_ctx, dev);
	cuCtxSetCurrent(probe_ctx);
	step("retain", r);
	CUcontext again;
	step("retain2", cuDevicePrimaryCtxRetain(&again, dev)); /* same context: no more cost */

	CUcontext c2 = NULL, c3 = NULL, c4 = NULL, c5 = NULL;
	step("create_v2", cuCtxCreate_v2(&c2, 0, dev));
	step("create_v3", cuCtxCreate_v3(&c3, NULL, 0, 0, dev));
	CUctxCreateParams params = {0};
	step("create_v4", cuCtxCreate_v4(&c4, &params, 0, dev));
	step("create_full", cuCtxCreate_v2(&c5, 0, dev)); /* no room for its cost */

	step("destroy", cuCtxDestroy_v2(c2));
	CUcontext att = NULL;
	cuCtxSetCurrent(c3);
	r = cuCtxAttach(&att, 0);
	step("attach", r == CUDA_SUCCESS && att != c3 ? CUDA_ERROR_UNKNOWN : r);
	step("detach1", cuCtxDetach(c3)); /* one usage left */
	step("detach2", cuCtxDetach(c3)); /* the last: destroyed */
	cuCtxSetCurrent(probe_ctx);

	step("reset", cuDevicePrimaryCtxReset_v2(dev));
	step("retain3", cuDevicePrimaryCtxRetain(&again, dev)); /* charged again */
	step("release1", cuDevicePrimaryCtxRelease_v2(dev));
	step("release2", cuDevicePrimaryCtxRelease_v2(dev));
	step("release3", cuDevicePrimaryCtxRelease_v2(dev)); /* the last reference */
	step("retain4", cuDevicePrimaryCtxRetain(&probe_ctx, dev));
	cuCtxSetCurrent(probe_ctx);

	printf("event=hold\n");
	ex_sleep_s(30);
	return 0;
}
