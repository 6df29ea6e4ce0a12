/*
 * fc_memlimit: runs NVML's memory-limit calls (R615) and driver
 * allocations in order, one step per argument group, printing one line each.
 *
 *   fc_memlimit STEP...
 *     set DEV PATH SOFT HARD   nvmlDeviceSetMemoryLimits_v1 (HARD "max": NVML_DEVICE_MEMORY_LIMIT_MAX)
 *     get DEV PATH             nvmlDeviceGetMemoryLimits_v1
 *     nulls DEV                both calls with a NULL struct, then a NULL nameSpace
 *     alloc ORD SIZE           cuMemAlloc on CUDA ordinal ORD (kept until freeall)
 *     freeall                  cuMemFree of every allocation made
 *     meminfo DEV              NVML's memory info (v1 and v2) and, with a context, cuMemGetInfo
 *     hold SECONDS             sleep (SIGUSR1 ends it)
 *
 *   event=set result=0
 *   event=get result=0 soft=... hard=... used=...
 *   event=nulls set=2 get=2 set_ns=2 get_ns=2
 *   event=alloc result=0|2
 *   event=meminfo total=... free=... used=... total_v2=... free_v2=... cu_total=... cu_free=...
 *   event=hold
 *   event=done
 * Sizes take the usual units (1MiB, 64M); NVML is reached with dlopen.
 */
#include "common.h"
#include "drvctx.h"

#include "nvml.h"

#include <dlfcn.h>
#include <stdbool.h>

static void *nvml;

static void *sym(const char *name)
{
	if (nvml == NULL) {
		nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		if (nvml == NULL)
			exit(3);
		nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(nvml, "nvmlInit_v2");
		nvmlReturn_t r = init();
		if (r != NVML_SUCCESS) {
			printf("event=nvml_init result=%d\n", (int)r);
			exit(3);
		}
	}
	void *f = dlsym(nvml, name);
	if (f == NULL)
		exit(3);
	return f;
}

static nvmlDevice_t handle(const char *idx)
{
	nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *) = sym("nvmlDeviceGetHandleByIndex_v2");
	nvmlDevice_t d = NULL;
	if (byidx((unsigned)atoi(idx), &d) != NVML_SUCCESS)
		exit(3);
	return d;
}

static uint64_t size_arg(const char *s)
{
	uint64_t v;
	if (strcmp(s, "max") == 0)
		return NVML_DEVICE_MEMORY_LIMIT_MAX;
	if (ex_parse_size(s, &v))
		exit(2);
	return v;
}

#define MAX_ALLOCS 64

int main(int argc, char **argv)
{
	CUdeviceptr ptrs[MAX_ALLOCS];
	int nptrs = 0;
	bool ctx = false;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		const char *op = argv[i];
		if (strcmp(op, "set") == 0 && i + 4 < argc) {
			nvmlReturn_t (*set)(nvmlDevice_t, nvmlSetMemoryLimits_v1_t *) = sym("nvmlDeviceSetMemoryLimits_v1");
			nvmlSetMemoryLimits_v1_t l = {argv[i + 2], size_arg(argv[i + 3]), size_arg(argv[i + 4])};
			printf("event=set result=%d\n", (int)set(handle(argv[i + 1]), &l));
			i += 4;
		} else if (strcmp(op, "get") == 0 && i + 2 < argc) {
			nvmlReturn_t (*get)(nvmlDevice_t, nvmlGetMemoryLimits_v1_t *) = sym("nvmlDeviceGetMemoryLimits_v1");
			nvmlGetMemoryLimits_v1_t l = {argv[i + 2], 1, 1, 1};
			nvmlReturn_t r = get(handle(argv[i + 1]), &l);
			printf("event=get result=%d soft=%llu hard=%llu used=%llu\n", (int)r, l.softLimit, l.hardLimit,
			       l.currentUsed);
			i += 2;
		} else if (strcmp(op, "nulls") == 0 && i + 1 < argc) {
			nvmlReturn_t (*set)(nvmlDevice_t, nvmlSetMemoryLimits_v1_t *) = sym("nvmlDeviceSetMemoryLimits_v1");
			nvmlReturn_t (*get)(nvmlDevice_t, nvmlGetMemoryLimits_v1_t *) = sym("nvmlDeviceGetMemoryLimits_v1");
			nvmlDevice_t d = handle(argv[i + 1]);
			nvmlSetMemoryLimits_v1_t sl = {NULL, 0, 1};
			nvmlGetMemoryLimits_v1_t gl = {NULL, 0, 0, 0};
			printf("event=nulls set=%d get=%d set_ns=%d get_ns=%d\n", (int)set(d, NULL), (int)get(d, NULL),
			       (int)set(d, &sl), (int)get(d, &gl));
			i += 1;
		} else if (strcmp(op, "alloc") == 0 && i + 2 < argc) {
			CUcontext c;
			if (!ctx && ex_driver_setup(atoi(argv[i + 1]), &c))
				return 1;
			ctx = true;
			CUdeviceptr p = 0;
			CUresult r = cuMemAlloc(&p, size_arg(argv[i + 2]));
			if (r == CUDA_SUCCESS && nptrs < MAX_ALLOCS)
				ptrs[nptrs++] = p;
			printf("event=alloc result=%d\n", (int)r);
			i += 2;
		} else if (strcmp(op, "freeall") == 0) {
			for (int k = 0; k < nptrs; k++)
				cuMemFree(ptrs[k]);
			printf("event=freeall count=%d\n", nptrs);
			nptrs = 0;
		} else if (strcmp(op, "meminfo") == 0 && i + 1 < argc) {
			nvmlReturn_t (*m1)(nvmlDevice_t, nvmlMemory_t *) = sym("nvmlDeviceGetMemoryInfo");
			nvmlReturn_t (*m2)(nvmlDevice_t, nvmlMemory_v2_t *) = sym("nvmlDeviceGetMemoryInfo_v2");
			nvmlDevice_t d = handle(argv[i + 1]);
			nvmlMemory_t a = {0};
			nvmlMemory_v2_t b = {.version = nvmlMemory_v2};
			if (m1(d, &a) != NVML_SUCCESS || m2(d, &b) != NVML_SUCCESS)
				return 1;
			size_t cf = 0, ct = 0;
			if (ctx)
				cuMemGetInfo(&cf, &ct);
			printf("event=meminfo total=%llu free=%llu used=%llu total_v2=%llu free_v2=%llu cu_total=%zu "
			       "cu_free=%zu\n",
			       a.total, a.free, a.used, b.total, b.free, ct, cf);
			i += 1;
		} else if (strcmp(op, "hold") == 0 && i + 1 < argc) {
			printf("event=hold\n");
			ex_sleep_s(strtod(argv[i + 1], NULL));
			i += 1;
		} else {
			fprintf(stderr, "fc_memlimit: bad step %s\n", op);
			return 2;
		}
	}
	printf("event=done\n");
	return 0;
}
