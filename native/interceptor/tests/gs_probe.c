/*
 * gs_probe: runs driver-API steps named on the command line and prints one
 * key=value line per step, for the interceptor test suites.
 *
 *   gs_probe [noinit] STEP...
 *
 * Steps (sizes take K/M/G/T or KiB/MiB/GiB/TiB suffixes):
 *   dev:N              retain device N's primary context and make it current
 *   alloc:S            cuMemAlloc_v2             managed:S   cuMemAllocManaged
 *   async:S            cuMemAllocAsync           asyncptsz:S cuMemAllocAsync_ptsz
 *   pool:S             cuMemAllocFromPoolAsync (default pool)   poolptsz:S
 *   pitch:W:H          cuMemAllocPitch_v2        vmm:S       cuMemCreate on the current device
 *   reserve:S          cuMemAddressReserve (the range the vmmmap steps map into)
 *   vmmmap:S[:OFF]     cuMemCreate S on the current device, cuMemMap it at OFF in the
 *                      range (default: after the previous mapping), cuMemSetAccess, then
 *                      cuMemRelease the handle (the mapping keeps the memory)
 *   vmmmapq:S[:OFF]    as vmmmap, without touching the memory from the host (a real
 *                      GPU's memory is not host-addressable)
 *   vmmthread:S[:N]    a new thread with no current context does what PyTorch's expandable
 *                      segments do from a worker thread: cuMemCreate S on device N (default
 *                      0), cuMemAddressReserve, cuMemMap, cuMemSetAccess; prints each rc;
 *                      the mapping is kept ("vmmthreadfree" undoes it from another such
 *                      thread: unmap, release, address free)
 *   unmap              cuMemUnmap the newest mapping
 *   unmaprange:OFF:S   cuMemUnmap S bytes at OFF in the range (may cover several mappings)
 *   addrfree           cuMemAddressFree the range (mappings left in it included)
 *   retain             cuMemRetainAllocationHandle on the newest mapping; the handle is
 *                      held ("free" releases it)
 *   stream:N           create a stream on device N's primary context (then restore the
 *                      current context); the async steps below use the newest one
 *   mkpool:N           cuMemPoolCreate on device N      devpool:N  cuDeviceGetMemPool(N)
 *   ctx:N:V            create a context on device N with cuCtxCreate (V=1), _v2, _v3 or
 *                      _v4 (it becomes current)
 *   ctxdestroy         cuCtxDestroy_v2 the newest created context  ctxdetach  cuCtxDetach it
 *   ctxattach          cuCtxAttach on the current context
 *   pretain:N          cuDevicePrimaryCtxRetain(N) (not made current)
 *   prelease:N         cuDevicePrimaryCtxRelease_v2(N)   preset:N  cuDevicePrimaryCtxReset_v2(N)
 *   galloc:N:S:F       a graph with one allocation node of S on device N (F=free: and its
 *                      free node; F=keep: none), instantiated (cuGraphInstantiateWithFlags;
 *                      F=auto: AUTO_FREE_ON_LAUNCH)
 *   glaunch            cuGraphLaunch the newest executable graph on the NULL stream
 *   gexecdestroy       cuGraphExecDestroy it      gtrim:N  cuDeviceGraphMemTrim(N)
 *   gmem:N             device N's graph memory: used and reserved (driver figures)
 *   vmmexport:S        cuMemCreate S (POSIX fd shareable) on the current device and export
 *                      it: prints the fd (the handle is held like vmm's)
 *   vmmimport:PID:FD   import the fd FD of process PID (/proc/PID/fd/FD); held
 *                      (vmmimport:self:last: the fd this process exported last)
 *   ipcget             cuIpcGetMemHandle of the newest allocation: prints it in hex
 *   ipcopen:HEX        cuIpcOpenMemHandle_v2 of that handle   ipcclose  close the newest
 *   vmmfill:S:COUNT    up to COUNT cuMemCreate of S on the current device, held; stops at the
 *                      first failure (prints how many were made and its rc)
 *   mkpools:N:COUNT    COUNT cuMemPoolCreate on device N (kept; the newest is the one used)
 *   sasync:S           cuMemAllocAsync on that stream
 *   spool:S            cuMemAllocFromPoolAsync from the newest pool on that stream
 *                      (the NULL stream when none was created)
 *   array:W:H          cuArrayCreate_v2 (float)  array3d:W:H:D cuArray3DCreate_v2
 *   mipmap:W:H:L       cuMipmappedArrayCreate
 *   modload            cuModuleLoadData of an image with no code (on fakecuda it holds
 *                      FAKECUDA_MODULE_BYTES of device memory no allocation shows)
 *   fill:S[:N]         allocate S-sized blocks until one fails (or N were made)
 *   afill:S[:N]        the same with cuMemAllocAsync (NULL stream)
 *   pthresh:N          the release threshold of the current device's default pool: N bytes,
 *                      or "max" (keep every freed byte, as PyTorch's and RMM's pools do)
 *   pinfo              that pool's reserved and used bytes (the driver's figures)
 *   host:S             cuMemAllocHost_v2 S and cuMemHostAlloc S (page-locked host memory,
 *                      held; free/freeall release it with cuMemFreeHost)
 *   free               release the newest allocation (with its kind's call)
 *   freeall            release everything held
 *   meminfo            cuMemGetInfo_v2           totalmem:N  cuDeviceTotalMem_v2
 *   meminfonull        cuMemGetInfo_v2 with one NULL out-parameter, then the other
 *   querynull          every memory query with NULL out-parameters only: cuMemGetInfo_v2,
 *                      cuDeviceTotalMem_v2 (device 0), nvmlDeviceGetMemoryInfo and _v2
 *                      (NVML device 0); prints their rcs
 *   nvml               NVML memory info (both versions) of every device
 *   gpa:NAME:VER:FL    cuGetProcAddress_v2; prints where the address points
 *   gpa4:NAME:VER:FL   the same through cuGetProcAddress (4 arguments)
 *   rtlddefault:NAME   dlsym(RTLD_DEFAULT, NAME); prints where the address points
 *   gpaalloc:VER:FL:S  allocate S with the cuMemAlloc that cuGetProcAddress_v2 returns,
 *                      then free it with the cuMemFree it returns ("gpakeep" keeps it,
 *                      "gpa4keep" the same through the 4-argument cuGetProcAddress)
 *   gpaasync:VER:FL:S  cuMemAllocAsync as cuGetProcAddress_v2 returns it (NULL stream), held
 *   uuid:N             UUID of device N (cuDeviceGetUuid_v2)
 *   held               bytes held by this program
 *   sync               cuCtxSynchronize (a pool gives freed memory back to the driver)
 *   pid                this process's pid
 *   clock              CLOCK_MONOTONIC now, in nanoseconds
 *   fds                how many file descriptors are open
 *   reopen             close every descriptor past stdio, then open /dev/zero
 *   reopened           whether reopen's descriptor is still open, on /dev/zero
 *   idlecredit:S       a new thread (on the current context) allocates S and frees it,
 *                      then sleeps until the process exits: it keeps the bytes as
 *                      credit (docs/ledger.md "Credit"); prints both rcs
 *   crossfree:N:S      a new thread (on the current context) allocates N blocks of S
 *                      and hands them over; the main thread frees them while that
 *                      thread goes on allocating and freeing one more block of S
 *                      (its pointers are in its own table front: docs/interceptor.md
 *                      "Tables"); prints how many calls failed on each side
 *   pause              print "paused" and wait for a line on stdin
 *   sleep:MS
 *   fork ... endfork   the child runs the steps in between, then exits;
 *                      the parent waits for it
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <dlfcn.h>
#include <limits.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda.h"
#include "cuda_ext.h"
#include "nvml.h"

enum kind { K_PTR, K_ASYNC, K_VMM, K_ARRAY, K_MIPMAP, K_HOST };

struct held {
	enum kind kind;
	uint64_t handle;
	uint64_t bytes;
};

static struct held *held;
static size_t nheld, capheld;
static uint64_t held_bytes;

static void push(enum kind k, uint64_t h, uint64_t bytes)
{
	if (nheld == capheld) {
		capheld = capheld ? capheld * 2 : 64;
		held = realloc(held, capheld * sizeof(*held));
		if (held == NULL) {
			perror("realloc");
			exit(2);
		}
	}
	held[nheld++] = (struct held){k, h, bytes};
	held_bytes += bytes;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; break;
	case 'm': case 'M': mul = 1ull << 20; break;
	case 'g': case 'G': mul = 1ull << 30; break;
	case 't': case 'T': mul = 1ull << 40; break;
	default: break;
	}
	return v * mul;
}

/* split "a:b:c" into at most n fields (modifies s) */
static int split(char *s, char **f, int n)
{
	int k = 0;
	while (k < n) {
		f[k++] = s;
		char *c = strchr(s, ':');
		if (c == NULL)
			break;
		*c = '\0';
		s = c + 1;
	}
	return k;
}

static CUresult release(struct held *h)
{
	switch (h->kind) {
	case K_PTR: return cuMemFree_v2(h->handle);
	case K_ASYNC: return cuMemFreeAsync(h->handle, NULL);
	case K_VMM: return cuMemRelease(h->handle);
	case K_ARRAY: return cuArrayDestroy((CUarray)(uintptr_t)h->handle);
	case K_MIPMAP: return cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h->handle);
	case K_HOST: return cuMemFreeHost((void *)(uintptr_t)h->handle);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void where(const char *key, void *p)
{
	Dl_info info;
	if (p == NULL) {
		printf(" %s=null", key);
		return;
	}
	if (dladdr(p, &info) == 0 || info.dli_fname == NULL) {
		printf(" %s=?", key);
		return;
	}
	const char *base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	printf(" %s=%s:%s", key, base, info.dli_sname ? info.dli_sname : "?");
}

typedef CUresult (*pfn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*pfn_free)(CUdeviceptr);
typedef CUresult (*pfn_gpa4)(const char *, void **, int, cuuint64_t);

static int nvml_ready;

/* the reservation the vmmmap steps map into, and their mappings */
static CUdeviceptr vbase;
static uint64_t vsize, vnext;
struct vmap {
	CUdeviceptr ptr;
	uint64_t size;
};
static struct vmap vmaps[256];
static size_t nvmaps;

static CUgraph pgraph;
static CUgraphExec pexec;
static CUdeviceptr ipcptr;
static int lastfd = -1;

static CUcontext made[64];
static int nmade;

typedef CUresult (*pfn_ctx_create1)(CUcontext *, unsigned int, CUdevice);

static CUstream pstream;
static CUmemoryPool ppool;

static CUresult unmap_range(CUdeviceptr p, uint64_t n)
{
	CUresult r = cuMemUnmap(p, n);
	if (r == CUDA_SUCCESS) {
		size_t w = 0;
		for (size_t i = 0; i < nvmaps; i++)
			if (!(vmaps[i].ptr >= p && vmaps[i].ptr + vmaps[i].size <= p + n))
				vmaps[w++] = vmaps[i];
		nvmaps = w;
	}
	return r;
}

struct idle_arg {
	CUcontext ctx;
	uint64_t n;
	CUresult ra, rf;
	int pipe[2];
};

/* allocate and free, report, then stay alive and idle */
static void *idle_thread(void *p)
{
	struct idle_arg *a = p;
	CUdeviceptr d = 0;
	a->ra = cuCtxSetCurrent(a->ctx);
	if (a->ra == CUDA_SUCCESS)
		a->ra = cuMemAlloc_v2(&d, a->n);
	a->rf = a->ra == CUDA_SUCCESS ? cuMemFree_v2(d) : CUDA_ERROR_INVALID_VALUE;
	char c = 1;
	if (write(a->pipe[1], &c, 1) != 1)
		return NULL;
	for (;;)
		pause();
	return NULL;
}

struct cross_arg {
	CUcontext ctx;
	uint64_t n, size;
	CUdeviceptr *p;
	int handed, stop;
	unsigned long long failed, loops;
};

/* allocate n blocks and hand them over, then allocate and free until told to stop */
static void *cross_thread(void *v)
{
	struct cross_arg *a = v;
	if (cuCtxSetCurrent(a->ctx) != CUDA_SUCCESS)
		a->failed++;
	for (uint64_t i = 0; i < a->n; i++)
		if (cuMemAlloc_v2(&a->p[i], a->size) != CUDA_SUCCESS) {
			a->p[i] = 0;
			a->failed++;
		}
	__atomic_store_n(&a->handed, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE) || a->loops < 1000) {
		CUdeviceptr q;
		if (cuMemAlloc_v2(&q, a->size) != CUDA_SUCCESS || cuMemFree_v2(q) != CUDA_SUCCESS)
			a->failed++;
		a->loops++;
	}
	return NULL;
}

/* the vmmthread step's mapping, made and undone by threads with no current context */
struct vmm_thread {
	int dev, undo;
	uint64_t n;
	CUmemGenericAllocationHandle h;
	CUdeviceptr base;
	CUresult rcur, rcreate, rreserve, rmap, raccess, runmap, rrelease, rfree;
};

static struct vmm_thread vthr;

static void *vmm_thread_main(void *v)
{
	struct vmm_thread *a = v;
	CUcontext cur = NULL;
	a->rcur = cuCtxGetCurrent(&cur);
	if (cur != NULL)
		a->rcur = CUDA_ERROR_INVALID_CONTEXT; /* must start without one */
	if (a->undo) {
		a->runmap = cuMemUnmap(a->base, a->n);
		a->rrelease = cuMemRelease(a->h);
		a->rfree = cuMemAddressFree(a->base, a->n);
		return NULL;
	}
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = a->dev;
	a->rcreate = cuMemCreate(&a->h, a->n, &prop, 0);
	a->rreserve = a->rmap = a->raccess = CUDA_ERROR_NOT_PERMITTED;
	if (a->rcreate != CUDA_SUCCESS)
		return NULL;
	a->rreserve = cuMemAddressReserve(&a->base, a->n, 0, 0, 0);
	if (a->rreserve == CUDA_SUCCESS)
		a->rmap = cuMemMap(a->base, a->n, 0, a->h, 0);
	if (a->rmap == CUDA_SUCCESS) {
		CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		a->raccess = cuMemSetAccess(a->base, a->n, &acc, 1);
	}
	return NULL;
}

static CUresult on_device(int ordinal, CUcontext *out)
{
	CUdevice d;
	CUresult r = cuDeviceGet(&d, ordinal);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(out, d);
	return r;
}

static int reopened_fd = -1; /* the "reopen" step's file */

static void step(char *arg)
{
	char *f[5] = {0};
	int nf = split(arg, f, 5);
	const char *cmd = f[0];
	CUresult r;

	if (strcmp(cmd, "dev") == 0 && nf >= 2) {
		CUdevice d;
		CUcontext ctx = NULL;
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS)
			r = cuDevicePrimaryCtxRetain(&ctx, d);
		if (r == CUDA_SUCCESS)
			r = cuCtxSetCurrent(ctx);
		printf("dev rc=%d dev=%d\n", r, atoi(f[1]));
	} else if ((strcmp(cmd, "alloc") == 0 || strcmp(cmd, "managed") == 0 ||
		    strcmp(cmd, "async") == 0 || strcmp(cmd, "asyncptsz") == 0 ||
		    strcmp(cmd, "pool") == 0 || strcmp(cmd, "poolptsz") == 0) &&
		   nf >= 2) {
		uint64_t n = parse_size(f[1]);
		CUdeviceptr p = 0;
		enum kind k = K_PTR;
		if (strcmp(cmd, "alloc") == 0) {
			r = cuMemAlloc_v2(&p, n);
		} else if (strcmp(cmd, "managed") == 0) {
			r = cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL);
		} else if (strcmp(cmd, "async") == 0) {
			r = cuMemAllocAsync(&p, n, NULL);
			k = K_ASYNC;
		} else if (strcmp(cmd, "asyncptsz") == 0) {
			r = cuMemAllocAsync_ptsz(&p, n, NULL);
			k = K_ASYNC;
		} else {
			CUdevice d;
			CUmemoryPool pool = NULL;
			k = K_ASYNC;
			r = cuCtxGetDevice(&d);
			if (r == CUDA_SUCCESS)
				r = cuDeviceGetDefaultMemPool(&pool, d);
			if (r == CUDA_SUCCESS)
				r = strcmp(cmd, "pool") == 0 ? cuMemAllocFromPoolAsync(&p, n, pool, NULL)
							     : cuMemAllocFromPoolAsync_ptsz(&p, n, pool, NULL);
		}
		if (r == CUDA_SUCCESS)
			push(k, p, n);
		printf("%s rc=%d bytes=%llu\n", cmd, r, (unsigned long long)n);
	} else if (strcmp(cmd, "pitch") == 0 && nf >= 3) {
		CUdeviceptr p = 0;
		size_t pitch = 0, w = parse_size(f[1]), h = parse_size(f[2]);
		r = cuMemAllocPitch_v2(&p, &pitch, w, h, 4);
		if (r == CUDA_SUCCESS)
			push(K_PTR, p, (uint64_t)pitch * h);
		printf("pitch rc=%d pitch=%zu bytes=%llu\n", r, pitch,
		       (unsigned long long)(r == CUDA_SUCCESS ? (uint64_t)pitch * h : 0));
	} else if (strcmp(cmd, "vmm") == 0 && nf >= 2) {
		CUdevice d = 0;
		CUmemGenericAllocationHandle h = 0;
		size_t gran = 0;
		uint64_t n = parse_size(f[1]);
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		r = cuCtxGetDevice(&d);
		prop.location.id = d;
		if (r == CUDA_SUCCESS)
			r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
		if (r == CUDA_SUCCESS && gran > 0)
			n = (n + gran - 1) / gran * gran;
		if (r == CUDA_SUCCESS)
			r = cuMemCreate(&h, n, &prop, 0);
		if (r == CUDA_SUCCESS)
			push(K_VMM, h, n);
		printf("vmm rc=%d bytes=%llu\n", r, (unsigned long long)n);
	} else if (strcmp(cmd, "reserve") == 0 && nf >= 2) {
		vsize = parse_size(f[1]);
		vnext = 0;
		r = cuMemAddressReserve(&vbase, vsize, 0, 0, 0);
		printf("reserve rc=%d bytes=%llu\n", r, (unsigned long long)vsize);
	} else if ((strcmp(cmd, "vmmmap") == 0 || strcmp(cmd, "vmmmapq") == 0) && nf >= 2) {
		int touch = strcmp(cmd, "vmmmap") == 0;
		CUdevice d = 0;
		CUmemGenericAllocationHandle h = 0;
		uint64_t n = parse_size(f[1]);
		uint64_t off = nf >= 3 ? parse_size(f[2]) : vnext;
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		CUresult rc = cuCtxGetDevice(&d), rm = -1, rr = -1;
		prop.location.id = d;
		if (rc == CUDA_SUCCESS)
			rc = cuMemCreate(&h, n, &prop, 0);
		if (rc == CUDA_SUCCESS) {
			CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
			rm = cuMemMap(vbase + off, n, 0, h, 0);
			if (rm == CUDA_SUCCESS)
				rm = cuMemSetAccess(vbase + off, n, &acc, 1);
			if (rm == CUDA_SUCCESS) {
				if (touch)
					((unsigned char *)(uintptr_t)(vbase + off))[n - 1] = 1;
				if (nvmaps < sizeof(vmaps) / sizeof(vmaps[0]))
					vmaps[nvmaps++] = (struct vmap){vbase + off, n};
				vnext = off + n;
			}
			rr = cuMemRelease(h);
		}
		printf("%s rc=%d map=%d release=%d bytes=%llu\n", cmd, rc, rm, rr, (unsigned long long)n);
	} else if ((strcmp(cmd, "vmmthread") == 0 && nf >= 2) || strcmp(cmd, "vmmthreadfree") == 0) {
		pthread_t t;
		vthr.undo = strcmp(cmd, "vmmthreadfree") == 0;
		if (!vthr.undo) {
			vthr.n = parse_size(f[1]);
			vthr.dev = nf >= 3 ? atoi(f[2]) : 0;
		}
		if (pthread_create(&t, NULL, vmm_thread_main, &vthr) != 0) {
			printf("%s rc=-1\n", cmd);
		} else {
			pthread_join(t, NULL);
			if (vthr.undo)
				printf("vmmthreadfree current=%d unmap=%d release=%d addrfree=%d\n", vthr.rcur,
				       vthr.runmap, vthr.rrelease, vthr.rfree);
			else
				printf("vmmthread current=%d rc=%d reserve=%d map=%d access=%d bytes=%llu\n",
				       vthr.rcur, vthr.rcreate, vthr.rreserve, vthr.rmap, vthr.raccess,
				       (unsigned long long)vthr.n);
		}
	} else if (strcmp(cmd, "unmap") == 0) {
		r = nvmaps > 0 ? unmap_range(vmaps[nvmaps - 1].ptr, vmaps[nvmaps - 1].size) : CUDA_ERROR_INVALID_VALUE;
		printf("unmap rc=%d\n", r);
	} else if (strcmp(cmd, "unmaprange") == 0 && nf >= 3) {
		r = unmap_range(vbase + parse_size(f[1]), parse_size(f[2]));
		printf("unmaprange rc=%d\n", r);
	} else if (strcmp(cmd, "addrfree") == 0) {
		r = cuMemAddressFree(vbase, vsize);
		if (r == CUDA_SUCCESS)
			nvmaps = 0;
		printf("addrfree rc=%d\n", r);
	} else if (strcmp(cmd, "retain") == 0) {
		CUmemGenericAllocationHandle h = 0;
		r = nvmaps > 0 ? cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)vmaps[nvmaps - 1].ptr)
			       : CUDA_ERROR_INVALID_VALUE;
		if (r == CUDA_SUCCESS)
			push(K_VMM, h, 0);
		printf("retain rc=%d\n", r);
	} else if (strcmp(cmd, "stream") == 0 && nf >= 2) {
		CUcontext cur = NULL, c = NULL;
		cuCtxGetCurrent(&cur);
		r = on_device(atoi(f[1]), &c);
		if (r == CUDA_SUCCESS)
			r = cuCtxSetCurrent(c);
		if (r == CUDA_SUCCESS)
			r = cuStreamCreate(&pstream, CU_STREAM_NON_BLOCKING);
		cuCtxSetCurrent(cur);
		printf("stream rc=%d dev=%s\n", r, f[1]);
	} else if ((strcmp(cmd, "mkpool") == 0 || strcmp(cmd, "devpool") == 0) && nf >= 2) {
		CUdevice d;
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS && strcmp(cmd, "devpool") == 0) {
			r = cuDeviceGetMemPool(&ppool, d);
		} else if (r == CUDA_SUCCESS) {
			CUmemPoolProps props;
			memset(&props, 0, sizeof(props));
			props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
			props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
			props.location.id = d;
			r = cuMemPoolCreate(&ppool, &props);
		}
		printf("%s rc=%d dev=%s\n", cmd, r, f[1]);
	} else if (strcmp(cmd, "ctx") == 0 && nf >= 3) {
		CUdevice d;
		CUcontext c = NULL;
		int v = atoi(f[2]);
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS) {
			if (v == 1) {
				pfn_ctx_create1 fn = (pfn_ctx_create1)dlsym(RTLD_DEFAULT, "cuCtxCreate");
				r = fn != NULL ? fn(&c, 0, d) : CUDA_ERROR_NOT_FOUND;
			} else if (v == 2) {
				r = cuCtxCreate_v2(&c, 0, d);
			} else if (v == 3) {
				r = cuCtxCreate_v3(&c, NULL, 0, 0, d);
			} else {
				/* zeroed well past the 12.x struct, should a newer
				 * driver read fields it added */
				union {
					CUctxCreateParams p;
					char pad[256];
				} params;
				memset(&params, 0, sizeof(params));
				r = cuCtxCreate_v4(&c, &params.p, 0, d);
			}
		}
		if (r == CUDA_SUCCESS && nmade < 64)
			made[nmade++] = c;
		printf("ctx rc=%d dev=%s ver=%d\n", r, f[1], v);
	} else if (strcmp(cmd, "ctxdestroy") == 0 || strcmp(cmd, "ctxdetach") == 0) {
		r = CUDA_ERROR_INVALID_CONTEXT;
		if (nmade > 0) {
			CUcontext c = made[nmade - 1];
			unsigned int v;
			r = strcmp(cmd, "ctxdestroy") == 0 ? cuCtxDestroy_v2(c) : cuCtxDetach(c);
			if (r == CUDA_SUCCESS && cuCtxGetApiVersion(c, &v) != CUDA_SUCCESS)
				nmade--; /* gone */
		}
		printf("%s rc=%d\n", cmd, r);
	} else if (strcmp(cmd, "ctxattach") == 0) {
		CUcontext c = NULL;
		r = cuCtxAttach(&c, 0);
		printf("ctxattach rc=%d\n", r);
	} else if ((strcmp(cmd, "pretain") == 0 || strcmp(cmd, "prelease") == 0 || strcmp(cmd, "preset") == 0) &&
		   nf >= 2) {
		CUdevice d;
		CUcontext c = NULL;
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS)
			r = strcmp(cmd, "pretain") == 0	   ? cuDevicePrimaryCtxRetain(&c, d)
			    : strcmp(cmd, "prelease") == 0 ? cuDevicePrimaryCtxRelease_v2(d)
							   : cuDevicePrimaryCtxReset_v2(d);
		printf("%s rc=%d dev=%s\n", cmd, r, f[1]);
	} else if (strcmp(cmd, "galloc") == 0 && nf >= 4) {
		CUgraphNode an = NULL, fn = NULL;
		CUDA_MEM_ALLOC_NODE_PARAMS ap;
		memset(&ap, 0, sizeof(ap));
		ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		ap.poolProps.location.id = atoi(f[1]);
		ap.bytesize = parse_size(f[2]);
		r = cuGraphCreate(&pgraph, 0);
		if (r == CUDA_SUCCESS)
			r = cuGraphAddMemAllocNode(&an, pgraph, NULL, 0, &ap);
		if (r == CUDA_SUCCESS && strcmp(f[3], "free") == 0)
			r = cuGraphAddMemFreeNode(&fn, pgraph, &an, 1, ap.dptr);
		if (r == CUDA_SUCCESS)
			r = cuGraphInstantiateWithFlags(&pexec, pgraph,
							strcmp(f[3], "auto") == 0
								? CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
								: 0);
		printf("galloc rc=%d\n", r);
	} else if (strcmp(cmd, "glaunch") == 0) {
		r = cuGraphLaunch(pexec, NULL);
		printf("glaunch rc=%d\n", r);
	} else if (strcmp(cmd, "gexecdestroy") == 0) {
		r = cuGraphExecDestroy(pexec);
		printf("gexecdestroy rc=%d\n", r);
	} else if (strcmp(cmd, "gtrim") == 0 && nf >= 2) {
		r = cuDeviceGraphMemTrim(atoi(f[1]));
		printf("gtrim rc=%d\n", r);
	} else if (strcmp(cmd, "gmem") == 0 && nf >= 2) {
		cuuint64_t used = 0, resv = 0;
		r = cuDeviceGetGraphMemAttribute(atoi(f[1]), CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetGraphMemAttribute(atoi(f[1]), CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &resv);
		printf("gmem rc=%d used=%llu reserved=%llu\n", r, (unsigned long long)used, (unsigned long long)resv);
	} else if (strcmp(cmd, "vmmexport") == 0 && nf >= 2) {
		CUdevice d = 0;
		CUmemGenericAllocationHandle h = 0;
		uint64_t n = parse_size(f[1]);
		int fd = -1;
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		r = cuCtxGetDevice(&d);
		prop.location.id = d;
		if (r == CUDA_SUCCESS)
			r = cuMemCreate(&h, n, &prop, 0);
		if (r == CUDA_SUCCESS) {
			push(K_VMM, h, n);
			r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		}
		lastfd = fd;
		printf("vmmexport rc=%d fd=%d pid=%d\n", r, fd, (int)getpid());
	} else if (strcmp(cmd, "vmmimport") == 0 && nf >= 3) {
		char path[64];
		CUmemGenericAllocationHandle h = 0;
		snprintf(path, sizeof(path), "/proc/%s/fd/%s", f[1], f[2]);
		int fd = strcmp(f[1], "self") == 0 ? lastfd : open(path, O_RDONLY | O_CLOEXEC);
		r = fd >= 0 ? cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
							       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
			    : CUDA_ERROR_INVALID_VALUE;
		int same = 0;
		for (size_t k = 0; r == CUDA_SUCCESS && k < nheld; k++)
			same |= held[k].kind == K_VMM && held[k].handle == h;
		if (r == CUDA_SUCCESS)
			push(K_VMM, h, 0);
		printf("vmmimport rc=%d same=%d\n", r, same);
	} else if (strcmp(cmd, "ipcget") == 0) {
		CUipcMemHandle ih;
		memset(&ih, 0, sizeof(ih));
		r = nheld > 0 ? cuIpcGetMemHandle(&ih, held[nheld - 1].handle) : CUDA_ERROR_INVALID_VALUE;
		printf("ipcget rc=%d handle=", r);
		for (int k = 0; k < CU_IPC_HANDLE_SIZE; k++)
			printf("%02x", (unsigned char)ih.reserved[k]);
		printf("\n");
	} else if (strcmp(cmd, "ipcopen") == 0 && nf >= 2) {
		CUipcMemHandle ih;
		memset(&ih, 0, sizeof(ih));
		for (int k = 0; k < CU_IPC_HANDLE_SIZE && f[1][2 * k] && f[1][2 * k + 1]; k++) {
			char b[3] = {f[1][2 * k], f[1][2 * k + 1], 0};
			ih.reserved[k] = (char)strtoul(b, NULL, 16);
		}
		r = cuIpcOpenMemHandle_v2(&ipcptr, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		printf("ipcopen rc=%d\n", r);
	} else if (strcmp(cmd, "ipcclose") == 0) {
		r = cuIpcCloseMemHandle(ipcptr);
		printf("ipcclose rc=%d\n", r);
	} else if (strcmp(cmd, "vmmfill") == 0 && nf >= 3) {
		CUdevice d = 0;
		uint64_t n = parse_size(f[1]);
		long made = 0, count = atol(f[2]);
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		r = cuCtxGetDevice(&d);
		prop.location.id = d;
		for (; r == CUDA_SUCCESS && made < count; made++) {
			CUmemGenericAllocationHandle h = 0;
			r = cuMemCreate(&h, n, &prop, 0);
			if (r != CUDA_SUCCESS)
				break;
			push(K_VMM, h, n);
		}
		printf("vmmfill rc=%d made=%ld\n", r, made);
	} else if (strcmp(cmd, "mkpools") == 0 && nf >= 3) {
		CUdevice d;
		long made = 0, count = atol(f[2]);
		r = cuDeviceGet(&d, atoi(f[1]));
		for (long k = 0; r == CUDA_SUCCESS && k < count; k++) {
			CUmemPoolProps props;
			memset(&props, 0, sizeof(props));
			props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
			props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
			props.location.id = d;
			CUmemoryPool pl;
			r = cuMemPoolCreate(&pl, &props);
			if (r == CUDA_SUCCESS) {
				ppool = pl;
				made++;
			}
		}
		printf("mkpools rc=%d dev=%s made=%ld\n", r, f[1], made);
	} else if ((strcmp(cmd, "sasync") == 0 || strcmp(cmd, "spool") == 0) && nf >= 2) {
		uint64_t n = parse_size(f[1]);
		CUdeviceptr p = 0;
		r = strcmp(cmd, "sasync") == 0 ? cuMemAllocAsync(&p, n, pstream)
					       : cuMemAllocFromPoolAsync(&p, n, ppool, pstream);
		if (r == CUDA_SUCCESS)
			push(K_ASYNC, p, n);
		printf("%s rc=%d bytes=%llu\n", cmd, r, (unsigned long long)n);
	} else if ((strcmp(cmd, "array") == 0 || strcmp(cmd, "array3d") == 0 ||
		    strcmp(cmd, "mipmap") == 0) &&
		   nf >= 3) {
		uint64_t w = parse_size(f[1]), h = parse_size(f[2]);
		uint64_t bytes = 0;
		if (strcmp(cmd, "array") == 0) {
			CUDA_ARRAY_DESCRIPTOR d = {.Width = w, .Height = h, .Format = CU_AD_FORMAT_FLOAT,
						   .NumChannels = 1};
			CUarray a = NULL;
			r = cuArrayCreate_v2(&a, &d);
			bytes = w * (h ? h : 1) * 4;
			if (r == CUDA_SUCCESS)
				push(K_ARRAY, (uint64_t)(uintptr_t)a, bytes);
		} else if (strcmp(cmd, "array3d") == 0) {
			uint64_t z = nf >= 4 ? parse_size(f[3]) : 0;
			CUDA_ARRAY3D_DESCRIPTOR d = {.Width = w, .Height = h, .Depth = z,
						     .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
			CUarray a = NULL;
			r = cuArray3DCreate_v2(&a, &d);
			bytes = w * (h ? h : 1) * (z ? z : 1) * 4;
			if (r == CUDA_SUCCESS)
				push(K_ARRAY, (uint64_t)(uintptr_t)a, bytes);
		} else {
			unsigned levels = nf >= 4 ? (unsigned)atoi(f[3]) : 1;
			CUDA_ARRAY3D_DESCRIPTOR d = {.Width = w, .Height = h, .Depth = 0,
						     .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
			CUmipmappedArray m = NULL;
			r = cuMipmappedArrayCreate(&m, &d, levels);
			for (unsigned l = 0; l < levels; l++) {
				uint64_t lw = w >> l, lh = h >> l;
				bytes += (lw ? lw : 1) * (h ? (lh ? lh : 1) : 1) * 4;
			}
			if (r == CUDA_SUCCESS)
				push(K_MIPMAP, (uint64_t)(uintptr_t)m, bytes);
		}
		printf("%s rc=%d bytes=%llu\n", cmd, r, (unsigned long long)bytes);
	} else if ((strcmp(cmd, "fill") == 0 || strcmp(cmd, "afill") == 0) && nf >= 2) {
		int async = cmd[0] == 'a';
		uint64_t n = parse_size(f[1]), total = 0;
		unsigned count = 0, most = nf >= 3 ? (unsigned)strtoul(f[2], NULL, 10) : UINT_MAX;
		CUdeviceptr p;
		while (count < most &&
		       (r = async ? cuMemAllocAsync(&p, n, NULL) : cuMemAlloc_v2(&p, n)) == CUDA_SUCCESS) {
			push(async ? K_ASYNC : K_PTR, p, n);
			total += n;
			count++;
		}
		printf("%s rc=%d n=%u bytes=%llu\n", cmd, r, count, (unsigned long long)total);
	} else if ((strcmp(cmd, "pthresh") == 0 && nf >= 2) || strcmp(cmd, "pinfo") == 0) {
		CUdevice d;
		CUmemoryPool pool = NULL;
		r = cuCtxGetDevice(&d);
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetDefaultMemPool(&pool, d);
		if (strcmp(cmd, "pthresh") == 0) {
			cuuint64_t v = strcmp(f[1], "max") == 0 ? UINT64_MAX : parse_size(f[1]);
			if (r == CUDA_SUCCESS)
				r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
			printf("pthresh rc=%d\n", r);
		} else {
			cuuint64_t res = 0, used = 0;
			if (r == CUDA_SUCCESS)
				r = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res);
			if (r == CUDA_SUCCESS)
				r = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
			printf("pinfo rc=%d reserved=%llu used=%llu\n", r, (unsigned long long)res,
			       (unsigned long long)used);
		}
	} else if (strcmp(cmd, "host") == 0 && nf >= 2) {
		uint64_t n = parse_size(f[1]);
		void *a = NULL, *b = NULL;
		CUresult ra = cuMemAllocHost_v2(&a, n);
		if (ra == CUDA_SUCCESS)
			push(K_HOST, (uint64_t)(uintptr_t)a, 0);
		CUresult rb = cuMemHostAlloc(&b, n, CU_MEMHOSTALLOC_PORTABLE);
		if (rb == CUDA_SUCCESS)
			push(K_HOST, (uint64_t)(uintptr_t)b, 0);
		printf("host allochost=%d hostalloc=%d bytes=%llu\n", ra, rb, (unsigned long long)n);
	} else if (strcmp(cmd, "free") == 0) {
		r = CUDA_ERROR_INVALID_VALUE;
		if (nheld > 0) {
			r = release(&held[nheld - 1]);
			if (r == CUDA_SUCCESS)
				held_bytes -= held[--nheld].bytes;
		}
		printf("free rc=%d\n", r);
	} else if (strcmp(cmd, "freeall") == 0) {
		int bad = 0;
		while (nheld > 0) {
			if (release(&held[nheld - 1]) != CUDA_SUCCESS)
				bad++;
			held_bytes -= held[--nheld].bytes;
		}
		printf("freeall failed=%d\n", bad);
	} else if (strcmp(cmd, "idlecredit") == 0 && nf >= 2) {
		static struct idle_arg a; /* the thread lives as long as the process */
		pthread_t t;
		char c;
		a.n = parse_size(f[1]);
		a.ra = a.rf = CUDA_ERROR_UNKNOWN;
		if (cuCtxGetCurrent(&a.ctx) != CUDA_SUCCESS || pipe(a.pipe) != 0 ||
		    pthread_create(&t, NULL, idle_thread, &a) != 0 || read(a.pipe[0], &c, 1) != 1) {
			printf("idlecredit rc=-1\n");
		} else {
			pthread_detach(t);
			printf("idlecredit alloc=%d free=%d\n", a.ra, a.rf);
		}
	} else if (strcmp(cmd, "crossfree") == 0 && nf >= 3) {
		struct cross_arg a = {.n = parse_size(f[1]), .size = parse_size(f[2])};
		pthread_t t;
		unsigned long long bad = 0;
		a.p = calloc(a.n ? a.n : 1, sizeof(*a.p));
		if (a.p == NULL || cuCtxGetCurrent(&a.ctx) != CUDA_SUCCESS ||
		    pthread_create(&t, NULL, cross_thread, &a) != 0) {
			printf("crossfree rc=-1\n");
		} else {
			while (!__atomic_load_n(&a.handed, __ATOMIC_ACQUIRE))
				sched_yield();
			for (uint64_t i = 0; i < a.n; i++)
				if (a.p[i] != 0 && cuMemFree_v2(a.p[i]) != CUDA_SUCCESS)
					bad++;
			__atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
			pthread_join(t, NULL);
			printf("crossfree alloc_failed=%llu free_failed=%llu loops=%llu\n", a.failed, bad, a.loops);
		}
		free(a.p);
	} else if (strcmp(cmd, "modload") == 0) {
		/* a module the driver holds device memory for (fakecuda:
		 * FAKECUDA_MODULE_BYTES); the image holds no code */
		static const unsigned char image[64];
		CUmodule m;
		r = cuModuleLoadData(&m, image);
		printf("modload rc=%d\n", r);
	} else if (strcmp(cmd, "meminfo") == 0) {
		size_t fr = 0, to = 0;
		r = cuMemGetInfo_v2(&fr, &to);
		printf("meminfo rc=%d free=%zu total=%zu\n", r, fr, to);
	} else if (strcmp(cmd, "meminfonull") == 0) {
		size_t to = 0, fr = 0;
		CUresult r1 = cuMemGetInfo_v2(NULL, &to);
		CUresult r2 = cuMemGetInfo_v2(&fr, NULL);
		printf("meminfonull rc1=%d rc2=%d free=%zu total=%zu\n", r1, r2, fr, to);
	} else if (strcmp(cmd, "querynull") == 0) {
		CUdevice d = 0;
		CUresult r1 = cuMemGetInfo_v2(NULL, NULL);
		CUresult r2 = cuDeviceGet(&d, 0);
		if (r2 == CUDA_SUCCESS)
			r2 = cuDeviceTotalMem_v2(NULL, d);
		nvmlReturn_t n0 = nvml_ready ? NVML_SUCCESS : nvmlInit_v2(), n1 = n0, n2 = n0;
		nvml_ready = n0 == NVML_SUCCESS;
		nvmlDevice_t dev;
		if (n0 == NVML_SUCCESS)
			n0 = nvmlDeviceGetHandleByIndex_v2(0, &dev);
		if (n0 == NVML_SUCCESS) {
			n1 = nvmlDeviceGetMemoryInfo(dev, NULL);
			n2 = nvmlDeviceGetMemoryInfo_v2(dev, NULL);
		}
		printf("querynull meminfo=%d totalmem=%d nvml=%d nvmlmem=%d nvmlmem2=%d\n", r1, r2, n0, n1, n2);
	} else if (strcmp(cmd, "totalmem") == 0 && nf >= 2) {
		CUdevice d;
		size_t b = 0;
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS)
			r = cuDeviceTotalMem_v2(&b, d);
		printf("totalmem rc=%d dev=%s bytes=%zu\n", r, f[1], b);
	} else if (strcmp(cmd, "nvml") == 0) {
		nvmlReturn_t nr = NVML_SUCCESS;
		if (!nvml_ready)
			nr = nvmlInit_v2();
		nvml_ready = nr == NVML_SUCCESS;
		unsigned cnt = 0;
		if (nr == NVML_SUCCESS)
			nr = nvmlDeviceGetCount_v2(&cnt);
		printf("nvml rc=%d count=%u\n", nr, cnt);
		for (unsigned i = 0; i < cnt; i++) {
			nvmlDevice_t dev;
			nvmlMemory_t m1 = {0};
			nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
			char uuid[96] = "";
			nvmlReturn_t a = nvmlDeviceGetHandleByIndex_v2(i, &dev);
			nvmlReturn_t b = a, c = a;
			if (a == NVML_SUCCESS) {
				nvmlDeviceGetUUID(dev, uuid, sizeof(uuid));
				b = nvmlDeviceGetMemoryInfo(dev, &m1);
				c = nvmlDeviceGetMemoryInfo_v2(dev, &m2);
			}
			printf("nvmldev index=%u uuid=%s rc1=%d total1=%llu free1=%llu used1=%llu rc2=%d "
			       "total2=%llu free2=%llu used2=%llu reserved2=%llu\n",
			       i, uuid, b, m1.total, m1.free, m1.used, c, m2.total, m2.free, m2.used,
			       m2.reserved);
		}
	} else if ((strcmp(cmd, "gpa") == 0 || strcmp(cmd, "gpa4") == 0) && nf >= 4) {
		void *p = NULL;
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		if (strcmp(cmd, "gpa") == 0) {
			r = cuGetProcAddress_v2(f[1], &p, atoi(f[2]), strtoull(f[3], NULL, 0), &st);
		} else {
			pfn_gpa4 g4 = (pfn_gpa4)dlsym(RTLD_DEFAULT, "cuGetProcAddress");
			r = g4 ? g4(f[1], &p, atoi(f[2]), strtoull(f[3], NULL, 0)) : CUDA_ERROR_NOT_FOUND;
		}
		printf("%s rc=%d status=%d name=%s", cmd, r, st, f[1]);
		where("at", p);
		printf("\n");
	} else if (strcmp(cmd, "rtlddefault") == 0 && nf >= 2) {
		printf("rtlddefault name=%s", f[1]);
		where("at", dlsym(RTLD_DEFAULT, f[1]));
		printf("\n");
	} else if ((strcmp(cmd, "gpaalloc") == 0 || strcmp(cmd, "gpakeep") == 0 || strcmp(cmd, "gpa4keep") == 0) &&
		   nf >= 4) {
		void *pa = NULL, *pf = NULL;
		int ver = atoi(f[1]);
		cuuint64_t fl = strtoull(f[2], NULL, 0);
		uint64_t n = parse_size(f[3]);
		CUdeviceptr p = 0;
		if (strcmp(cmd, "gpa4keep") == 0) {
			pfn_gpa4 g4 = (pfn_gpa4)dlsym(RTLD_DEFAULT, "cuGetProcAddress");
			r = g4 ? g4("cuMemAlloc", &pa, ver, fl) : CUDA_ERROR_NOT_FOUND;
			if (r == CUDA_SUCCESS)
				r = g4("cuMemFree", &pf, ver, fl);
		} else {
			r = cuGetProcAddress_v2("cuMemAlloc", &pa, ver, fl, NULL);
			if (r == CUDA_SUCCESS)
				r = cuGetProcAddress_v2("cuMemFree", &pf, ver, fl, NULL);
		}
		CUresult ra = r, rf = r;
		if (r == CUDA_SUCCESS) {
			ra = ((pfn_alloc)pa)(&p, n);
			if (ra == CUDA_SUCCESS && strcmp(cmd, "gpaalloc") == 0)
				rf = ((pfn_free)pf)(p);
			else if (ra == CUDA_SUCCESS)
				push(K_PTR, p, n);
		}
		printf("%s rc=%d alloc=%d free=%d", cmd, r, ra, rf);
		where("alloc_at", pa);
		printf("\n");
	} else if (strcmp(cmd, "gpaasync") == 0 && nf >= 4) {
		void *pa = NULL;
		uint64_t n = parse_size(f[3]);
		CUdeviceptr p = 0;
		CUresult ra;
		r = cuGetProcAddress_v2("cuMemAllocAsync", &pa, atoi(f[1]), strtoull(f[2], NULL, 0), NULL);
		ra = r;
		if (r == CUDA_SUCCESS) {
			ra = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))pa)(&p, n, NULL);
			if (ra == CUDA_SUCCESS)
				push(K_ASYNC, p, n);
		}
		printf("gpaasync rc=%d alloc=%d", r, ra);
		where("alloc_at", pa);
		printf("\n");
	} else if (strcmp(cmd, "uuid") == 0 && nf >= 2) {
		CUdevice d;
		CUuuid u;
		memset(&u, 0, sizeof(u));
		r = cuDeviceGet(&d, atoi(f[1]));
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetUuid_v2(&u, d);
		const unsigned char *b = (const unsigned char *)u.bytes;
		printf("uuid rc=%d dev=%s uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
		       r, f[1], b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		       b[14], b[15]);
	} else if (strcmp(cmd, "held") == 0) {
		printf("held bytes=%llu n=%zu\n", (unsigned long long)held_bytes, nheld);
	} else if (strcmp(cmd, "fds") == 0) {
		int n = -1;
		DIR *d = opendir("/proc/self/fd");
		if (d != NULL) {
			n = 0;
			while (readdir(d) != NULL)
				n++;
			n -= 3; /* ".", ".." and the directory's own fd */
			closedir(d);
		}
		printf("fds n=%d\n", n);
	} else if (strcmp(cmd, "reopen") == 0) {
		/* what some programs do at start: close every descriptor past
		 * stdio, then open files, which get the lowest numbers */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		reopened_fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
		printf("reopen fd=%d\n", reopened_fd);
	} else if (strcmp(cmd, "reopened") == 0) {
		struct stat st;
		int ok = reopened_fd >= 0 && fstat(reopened_fd, &st) == 0 && S_ISCHR(st.st_mode);
		printf("reopened ok=%d\n", ok);
	} else if (strcmp(cmd, "pid") == 0) {
		printf("pid pid=%d\n", (int)getpid());
	} else if (strcmp(cmd, "sync") == 0) {
		r = cuCtxSynchronize();
		printf("sync rc=%d\n", r);
	} else if (strcmp(cmd, "clock") == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		printf("clock ns=%lld\n", (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec);
	} else if (strcmp(cmd, "pause") == 0) {
		printf("paused\n");
		fflush(stdout);
		char line[64];
		if (fgets(line, sizeof(line), stdin) == NULL)
			printf("pause eof=1\n");
	} else if (strcmp(cmd, "sleep") == 0 && nf >= 2) {
		struct timespec ts = {.tv_sec = atoi(f[1]) / 1000, .tv_nsec = (atoi(f[1]) % 1000) * 1000000l};
		nanosleep(&ts, NULL);
	} else {
		printf("error unknown-step=%s\n", cmd);
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int i = 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (i < argc && strcmp(argv[i], "noinit") == 0) {
		i++;
	} else {
		CUresult r = cuInit(0);
		printf("init rc=%d\n", r);
	}
	for (; i < argc; i++) {
		if (strcmp(argv[i], "fork") == 0) {
			int end = i + 1;
			while (end < argc && strcmp(argv[end], "endfork") != 0)
				end++;
			fflush(stdout);
			pid_t pid = fork();
			if (pid == 0) {
				printf("child pid=%d\n", (int)getpid());
				for (int j = i + 1; j < end; j++)
					step(argv[j]);
				fflush(stdout);
				_exit(0);
			}
			int status = 0;
			waitpid(pid, &status, 0);
			printf("forked child=%d exit=%d\n", (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
			i = end;
			continue;
		}
		step(argv[i]);
	}
	return 0;
}
