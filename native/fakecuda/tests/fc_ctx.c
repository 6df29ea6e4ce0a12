/*
 * fc_ctx: contexts, streams, events, modules and launches behave as the
 * driver documents them (synchronously). One event=check line per property.
 */
#include <pthread.h>
#include <sys/wait.h>

#include "common.h"
#include "drvctx.h"
#include "fc_check.h"

static CUresult thread_result;

static void *other_thread(void *arg)
{
	CUcontext c = (CUcontext)1;
	CUdeviceptr p;
	(void)arg;
	/* a new thread starts without a current context */
	thread_result = cuCtxGetCurrent(&c) == CUDA_SUCCESS && c == NULL ? cuMemAlloc(&p, 1 << 20) : CUDA_ERROR_UNKNOWN;
	return NULL;
}

static int host_fn_ran;
static void host_fn(void *u)
{
	*(int *)u = 1;
}

/* A child forked after cuInit holds its own memory (its allocation shows in
 * cuMemGetInfo) and the node gets it back when the child dies without exit
 * handlers. */
static int fork_child_own_usage(void)
{
	size_t before = 0, seen = 0, after = 0, total = 0;
	int fds[2];
	if (cuMemGetInfo(&before, &total) != CUDA_SUCCESS || pipe(fds) != 0)
		return 0;
	pid_t k = fork();
	if (k == 0) {
		CUdeviceptr c;
		size_t f = 0;
		int ok = cuMemAlloc(&c, 256 << 20) == CUDA_SUCCESS && cuMemGetInfo(&f, &total) == CUDA_SUCCESS;
		if (write(fds[1], &f, sizeof(f)) != (ssize_t)sizeof(f) || !ok)
			_exit(1);
		_exit(0);
	}
	int st = -1;
	int got = read(fds[0], &seen, sizeof(seen)) == (ssize_t)sizeof(seen);
	waitpid(k, &st, 0);
	close(fds[0]);
	close(fds[1]);
	return got && WIFEXITED(st) && WEXITSTATUS(st) == 0 && seen == before - (256 << 20) &&
	       cuMemGetInfo(&after, &total) == CUDA_SUCCESS && after == before;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdeviceptr p;
	check("not_initialized", cuMemAlloc(&p, 1) == CUDA_ERROR_NOT_INITIALIZED);
	check("init", cuInit(0) == CUDA_SUCCESS);
	check("no_context", cuMemAlloc(&p, 1) == CUDA_ERROR_INVALID_CONTEXT);
	int ver = 0;
	check("driver_version", cuDriverGetVersion(&ver) == CUDA_SUCCESS && ver == 12060);

	/* primary context */
	CUcontext prim, prim2;
	unsigned flags = 99;
	int active = -1;
	check("primary_inactive", cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
	check("primary_set_flags", cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC) == CUDA_SUCCESS);
	check("primary_retain", cuDevicePrimaryCtxRetain(&prim, 0) == CUDA_SUCCESS &&
					cuDevicePrimaryCtxRetain(&prim2, 0) == CUDA_SUCCESS && prim == prim2);
	check("primary_active", cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 1 &&
					flags == CU_CTX_SCHED_BLOCKING_SYNC);
	check("set_current", cuCtxSetCurrent(prim) == CUDA_SUCCESS);
	CUcontext cur = NULL;
	CUdevice dev = -1;
	unsigned cflags = 0;
	check("get_current", cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == prim);
	check("get_device", cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 0);
	check("get_flags", cuCtxGetFlags(&cflags) == CUDA_SUCCESS && cflags == CU_CTX_SCHED_BLOCKING_SYNC);
	check("synchronize", cuCtxSynchronize() == CUDA_SUCCESS);

	/* per-thread current context */
	pthread_t th;
	pthread_create(&th, NULL, other_thread, NULL);
	pthread_join(th, NULL);
	check("per_thread_current", thread_result == CUDA_ERROR_INVALID_CONTEXT);

	/* created contexts: push/pop, and destruction frees their memory */
	size_t free0, free1, free2, total;
	CUcontext mine, popped = NULL;
	check("create_pushes", cuCtxCreate(&mine, 0, 1) == CUDA_SUCCESS && cuCtxGetCurrent(&cur) == CUDA_SUCCESS &&
				       cur == mine && cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 1);
	check("meminfo_of_current_device", cuMemGetInfo(&free0, &total) == CUDA_SUCCESS && total == (2ull << 30));
	check("alloc_in_created", cuMemAlloc(&p, 512 << 20) == CUDA_SUCCESS && cuMemGetInfo(&free1, &total) == CUDA_SUCCESS &&
					  free1 == free0 - (512 << 20));
	check("pop", cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == mine && cuCtxGetCurrent(&cur) == CUDA_SUCCESS &&
			     cur == prim);
	check("push", cuCtxPushCurrent(mine) == CUDA_SUCCESS && cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == mine);
	check("destroy", cuCtxDestroy(mine) == CUDA_SUCCESS && cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == prim);
	check("destroy_frees_memory", cuCtxPushCurrent(prim) == CUDA_SUCCESS && cuCtxCreate(&mine, 0, 1) == CUDA_SUCCESS &&
					      cuMemGetInfo(&free2, &total) == CUDA_SUCCESS && free2 == free0 &&
					      cuCtxDestroy(mine) == CUDA_SUCCESS);
	check("destroyed_handle", cuCtxPushCurrent(mine) == CUDA_ERROR_INVALID_CONTEXT);
	check("bad_device", cuCtxCreate(&mine, 0, 7) == CUDA_ERROR_INVALID_DEVICE);

	/* a context takes its cuMemAlloc memory with it (the pointer is then
	 * unknown: CUDA_ERROR_INVALID_VALUE, as on the driver), not memory from a
	 * pool, which belongs to no context; freed into its pool, that memory
	 * stays the pool's until a synchronisation (release threshold 0) */
	CUdeviceptr gone = 0, pooled = 0;
	CUcontext owner = NULL;
	unsigned long long id = 0, pool_id = 0;
	check("pointer_attributes",
	      cuCtxCreate(&mine, 0, 0) == CUDA_SUCCESS && cuMemAlloc(&gone, 64 << 20) == CUDA_SUCCESS &&
		      cuMemAllocAsync(&pooled, 64 << 20, NULL) == CUDA_SUCCESS &&
		      cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, gone) == CUDA_SUCCESS && owner == mine &&
		      cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, gone) == CUDA_SUCCESS && id != 0 &&
		      cuPointerGetAttribute(&pool_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, pooled) == CUDA_SUCCESS &&
		      pool_id != id && cuMemGetInfo(&free0, &total) == CUDA_SUCCESS);
	check("destroy_keeps_pool_memory",
	      cuCtxDestroy(mine) == CUDA_SUCCESS &&
		      cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, gone) == CUDA_ERROR_INVALID_VALUE &&
		      cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, gone) == CUDA_ERROR_INVALID_VALUE &&
		      cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, pooled) == CUDA_SUCCESS && id == pool_id &&
		      cuMemGetInfo(&free1, &total) == CUDA_SUCCESS && free1 == free0 + (64 << 20) &&
		      cuMemFreeAsync(pooled, NULL) == CUDA_SUCCESS && cuMemGetInfo(&free2, &total) == CUDA_SUCCESS &&
		      free2 == free1 /* the pool keeps it */ && cuCtxSynchronize() == CUDA_SUCCESS &&
		      cuMemGetInfo(&free2, &total) == CUDA_SUCCESS && free2 == free1 + (64 << 20));
	check("invalid_free", cuMemFree(0x1000) == CUDA_ERROR_INVALID_VALUE);

	/* streams, events, host functions: accepted, synchronous */
	CUstream s;
	CUevent e0, e1;
	float ms = -1;
	check("stream", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS && cuStreamQuery(s) == CUDA_SUCCESS &&
				cuStreamSynchronize(s) == CUDA_SUCCESS);
	check("events", cuEventCreate(&e0, 0) == CUDA_SUCCESS && cuEventCreate(&e1, 0) == CUDA_SUCCESS &&
				cuEventRecord(e0, s) == CUDA_SUCCESS && cuEventRecord(e1, s) == CUDA_SUCCESS &&
				cuStreamWaitEvent(s, e1, 0) == CUDA_SUCCESS && cuEventSynchronize(e1) == CUDA_SUCCESS &&
				cuEventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS && ms >= 0);
	check("host_func", cuLaunchHostFunc(s, host_fn, &host_fn_ran) == CUDA_SUCCESS && host_fn_ran == 1);

	/* modules and launches */
	CUmodule m;
	CUfunction f;
	static const char image[] = "fake cubin";
	void *params[1] = {&p};
	check("module", cuModuleLoadData(&m, image) == CUDA_SUCCESS && cuModuleGetFunction(&f, m, "kernel") == CUDA_SUCCESS);
	check("launch", cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, s, params, NULL) == CUDA_SUCCESS);
	check("launch_bad_block", cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, params, NULL) == CUDA_ERROR_INVALID_VALUE);
	check("module_file_missing", cuModuleLoad(&m, "/nonexistent/kernel.cubin") == CUDA_ERROR_FILE_NOT_FOUND);
	check("teardown", cuEventDestroy(e0) == CUDA_SUCCESS && cuEventDestroy(e1) == CUDA_SUCCESS &&
				  cuStreamDestroy(s) == CUDA_SUCCESS && cuStreamSynchronize(s) == CUDA_ERROR_INVALID_HANDLE);

	/* primary release and reset give the primary context's memory back,
	 * not pool memory */
	CUmemoryPool dpool = NULL;
	check("reset_keeps_pool_memory",
	      cuCtxSetCurrent(prim) == CUDA_SUCCESS && cuMemAllocAsync(&pooled, 64 << 20, NULL) == CUDA_SUCCESS &&
		      cuMemAlloc(&gone, 64 << 20) == CUDA_SUCCESS && cuMemGetInfo(&free0, &total) == CUDA_SUCCESS &&
		      cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS && cuMemGetInfo(&free1, &total) == CUDA_SUCCESS &&
		      free1 == free0 + (64 << 20) && cuMemFree(gone) == CUDA_ERROR_INVALID_VALUE &&
		      cuMemFreeAsync(pooled, NULL) == CUDA_SUCCESS && cuDeviceGetDefaultMemPool(&dpool, 0) == CUDA_SUCCESS &&
		      cuMemPoolTrimTo(dpool, 0) == CUDA_SUCCESS); /* the pool gives back what it kept */
	CUdeviceptr q;
	check("release", cuCtxSetCurrent(prim) == CUDA_SUCCESS && cuMemAlloc(&q, 1 << 30) == CUDA_SUCCESS &&
				 cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS &&
				 cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
	check("release_frees_memory", cuDevicePrimaryCtxRetain(&prim, 0) == CUDA_SUCCESS &&
					      cuMemGetInfo(&free0, &total) == CUDA_SUCCESS && free0 == total);

	check("fork_child_own_usage", fork_child_own_usage());

	const char *str = NULL;
	check("error_strings", cuGetErrorName(CUDA_ERROR_INVALID_CONTEXT, &str) == CUDA_SUCCESS &&
				       strcmp(str, "CUDA_ERROR_INVALID_CONTEXT") == 0 &&
				       cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str) == CUDA_SUCCESS &&
				       strcmp(str, "out of memory") == 0 && cuGetErrorName((CUresult)12345, &str) == CUDA_ERROR_INVALID_VALUE);
	return summary();
}
