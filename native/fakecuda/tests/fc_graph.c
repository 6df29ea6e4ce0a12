/*
 * fc_graph: graph memory nodes and imported memory behave as documented
 * (docs/fakecuda.md). One event=check line per property.
 */
#include "common.h"
#include "drvctx.h"
#include "fc_check.h"
#include "cuda_ext.h"

static uint64_t attr(CUgraphMem_attribute a)
{
	cuuint64_t v = 0;
	cuDeviceGetGraphMemAttribute(0, a, &v);
	return v;
}

static CUgraphExec build(size_t bytes, int with_free, unsigned long long flags, CUdeviceptr *where)
{
	CUgraph g;
	CUgraphNode an, fn;
	CUgraphExec e = NULL;
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = bytes;
	if (cuGraphCreate(&g, 0) != CUDA_SUCCESS || cuGraphAddMemAllocNode(&an, g, NULL, 0, &p) != CUDA_SUCCESS)
		return NULL;
	if (with_free && cuGraphAddMemFreeNode(&fn, g, &an, 1, p.dptr) != CUDA_SUCCESS)
		return NULL;
	if (cuGraphInstantiateWithFlags(&e, g, flags) != CUDA_SUCCESS)
		return NULL;
	if (where)
		*where = p.dptr;
	return e;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUcontext ctx;
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	const size_t mib = 1 << 20;
	size_t f0 = free_now();

	CUdeviceptr va = 0;
	CUgraphExec e1 = build(64 * mib, 1, 0, &va);
	check("alloc_node_fixes_an_address", e1 != NULL && va != 0);
	check("node_allocates_nothing", free_now() == f0 && attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0);
	check("launch", cuGraphLaunch(e1, NULL) == CUDA_SUCCESS);
	check("pool_holds_after_free_node", free_now() == f0 - 64 * mib &&
						    attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 64 * mib &&
						    attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
	check("relaunch_reuses_pool", cuGraphLaunch(e1, NULL) == CUDA_SUCCESS && free_now() == f0 - 64 * mib);
	check("trim", cuDeviceGraphMemTrim(0) == CUDA_SUCCESS && free_now() == f0);

	CUgraphExec e2 = build(32 * mib, 0, 0, NULL);
	check("live_after_launch", e2 != NULL && cuGraphLaunch(e2, NULL) == CUDA_SUCCESS &&
					   attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 32 * mib);
	check("relaunch_while_live_fails", cuGraphLaunch(e2, NULL) == CUDA_ERROR_INVALID_VALUE);
	check("trim_keeps_live", cuDeviceGraphMemTrim(0) == CUDA_SUCCESS && free_now() == f0 - 32 * mib);
	check("exec_destroy_frees_to_pool", cuGraphExecDestroy(e2) == CUDA_SUCCESS &&
						    attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0 &&
						    free_now() == f0 - 32 * mib);
	cuDeviceGraphMemTrim(0);
	CUgraphExec e3 = build(16 * mib, 0, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, NULL);
	check("auto_free_relaunch", e3 != NULL && cuGraphLaunch(e3, NULL) == CUDA_SUCCESS &&
					    cuGraphLaunch(e3, NULL) == CUDA_SUCCESS &&
					    attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 16 * mib);
	cuGraphExecDestroy(e3);
	cuDeviceGraphMemTrim(0);
	size_t f1 = free_now();
	CUgraphExec big = build(f1 + 2 * mib, 1, 0, NULL);
	check("launch_past_the_device_fails", big != NULL && cuGraphLaunch(big, NULL) == CUDA_ERROR_OUT_OF_MEMORY &&
						      free_now() == f1);
	check("high_watermarks", attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) == 64 * mib &&
					 attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 64 * mib);

	/* a shareable handle imported in its own process is the same handle */
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemGenericAllocationHandle h = 0, h2 = 0;
	int fd = -1;
	size_t f2 = free_now();
	check("export", cuMemCreate(&h, 4 * mib, &prop, 0) == CUDA_SUCCESS &&
				cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
					CUDA_SUCCESS);
	check("import_own", cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
							   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS &&
				    h2 == h && free_now() == f2 - 4 * mib);
	check("two_releases", cuMemRelease(h) == CUDA_SUCCESS && free_now() == f2 - 4 * mib &&
				      cuMemRelease(h2) == CUDA_SUCCESS && free_now() == f2);

	/* IPC within the exporting process is refused */
	CUdeviceptr p = 0, q = 0;
	CUipcMemHandle ih;
	check("ipc_own_process", cuMemAlloc(&p, mib) == CUDA_SUCCESS && cuIpcGetMemHandle(&ih, p) == CUDA_SUCCESS &&
					 cuIpcOpenMemHandle_v2(&q, ih, 0) == CUDA_ERROR_INVALID_CONTEXT);
	cuMemFree(p);
	return summary();
}
