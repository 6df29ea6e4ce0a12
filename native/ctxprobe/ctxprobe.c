/*
 * gpuslice-ctxprobe: what a CUDA context costs on each named GPU, measured
 * once per node by gpusliced so that a job's first process does not have to
 * load and start NVML to find out (docs/charging.md "What a context
 * costs").
 *
 *   gpuslice-ctxprobe [--cuda LIB] [--nvml LIB] UUID...
 *
 * For each GPU, in the order given, one line on stdout:
 *   UUID ok BYTES     this process's usage on the GPU (NVML running
 *                     processes) after its primary context minus before
 *   UUID busy N       N other processes hold the GPU: nothing was created
 *                     there (a job's memory is never put at risk by this)
 *   UUID error TEXT   the GPU could not be measured
 * Exit status: 0 when every GPU has its line, 1 when the driver or NVML
 * cannot be loaded or started (stderr says which), 2 on a usage error.
 *
 * The same figure the interceptor measures in a job's first process, the
 * same way: before and after the first context, as the driver reports it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cuda.h"
#include "gpu_uuid.h"
#include "nvml.h"

typedef CUresult (*pfn_cuInit)(unsigned int);
typedef CUresult (*pfn_cuDeviceGetCount)(int *);
typedef CUresult (*pfn_cuDeviceGet)(CUdevice *, int);
typedef CUresult (*pfn_cuDeviceGetUuid)(CUuuid *, CUdevice);
typedef CUresult (*pfn_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
typedef CUresult (*pfn_cuDevicePrimaryCtxRelease)(CUdevice);
typedef nvmlReturn_t (*pfn_nvmlInit)(void);
typedef nvmlReturn_t (*pfn_nvmlShutdown)(void);
typedef nvmlReturn_t (*pfn_nvmlDeviceGetHandleByUUID)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*pfn_nvmlDeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

static struct {
	pfn_cuInit init;
	pfn_cuDeviceGetCount count;
	pfn_cuDeviceGet get;
	pfn_cuDeviceGetUuid uuid;
	pfn_cuDevicePrimaryCtxRetain retain;
	pfn_cuDevicePrimaryCtxRelease release;
} cu;

static struct {
	pfn_nvmlInit init;
	pfn_nvmlShutdown shutdown;
	pfn_nvmlDeviceGetHandleByUUID byuuid;
	pfn_nvmlDeviceGetComputeRunningProcesses procs;
} nv;

/* An entry point to find: where it goes, and its names, newest first. */
struct want {
	void **dst;
	const char *names[3];
};

/* dlopen path (what: what it should be) and find every entry point of w;
 * -1, saying what is missing, when the library or one of them is not there. */
static int load(const char *path, const char *what, const struct want *w, size_t n)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "gpuslice-ctxprobe: cannot load %s: %s\n", what, dlerror());
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		*w[i].dst = NULL;
		for (const char *const *name = w[i].names; *name != NULL && *w[i].dst == NULL; name++)
			*w[i].dst = dlsym(lib, *name);
		if (*w[i].dst == NULL) {
			fprintf(stderr, "gpuslice-ctxprobe: %s has no %s\n", path, w[i].names[0]);
			return -1;
		}
	}
	return 0;
}

static int load_cuda(const char *path)
{
	const struct want w[] = {
		{(void **)&cu.init, {"cuInit"}},
		{(void **)&cu.count, {"cuDeviceGetCount"}},
		{(void **)&cu.get, {"cuDeviceGet"}},
		{(void **)&cu.uuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}},
		{(void **)&cu.retain, {"cuDevicePrimaryCtxRetain"}},
		{(void **)&cu.release, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
	};
	if (load(path, "the CUDA driver", w, sizeof w / sizeof w[0]) < 0)
		return -1;
	CUresult r = cu.init(0);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "gpuslice-ctxprobe: cuInit: error %d\n", (int)r);
		return -1;
	}
	return 0;
}

static int load_nvml(const char *path)
{
	const struct want w[] = {
		{(void **)&nv.init, {"nvmlInit_v2"}},
		{(void **)&nv.shutdown, {"nvmlShutdown"}},
		{(void **)&nv.byuuid, {"nvmlDeviceGetHandleByUUID"}},
		{(void **)&nv.procs, {"nvmlDeviceGetComputeRunningProcesses_v3"}},
	};
	if (load(path, "NVML", w, sizeof w / sizeof w[0]) < 0)
		return -1;
	nvmlReturn_t r = nv.init();
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "gpuslice-ctxprobe: nvmlInit: error %d\n", (int)r);
		return -1;
	}
	return 0;
}

/* The CUDA device whose UUID, written as NVML writes it, is want (any
 * case); -1 when none is. */
static int find_device(const char *want, CUdevice *out)
{
	int n = 0;
	if (cu.count(&n) != CUDA_SUCCESS)
		return -1;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CUuuid id;
		char text[GPU_UUID_TEXT_LEN];
		if (cu.get(&d, i) != CUDA_SUCCESS || cu.uuid(&id, d) != CUDA_SUCCESS)
			continue;
		gpu_uuid_format((const unsigned char *)id.bytes, text, sizeof text);
		if (strcasecmp(text, want) == 0) {
			*out = d;
			return 0;
		}
	}
	return -1;
}

/* The processes NVML lists on h: this one's usage in *own (0 when not
 * listed), the number of others in *others. -1 when NVML cannot list
 * them, -2 when it lists this one without a figure (NVML_VALUE_NOT_AVAILABLE). */
static int usage(nvmlDevice_t h, unsigned long long *own, unsigned int *others)
{
	unsigned int cap = 64, n;
	nvmlProcessInfo_t *info;
	nvmlReturn_t r;
	for (;;) {
		info = calloc(cap, sizeof(*info));
		if (info == NULL)
			return -1;
		n = cap;
		r = nv.procs(h, &n, info);
		if (r != NVML_ERROR_INSUFFICIENT_SIZE || cap >= 65536)
			break;
		free(info);
		cap = n + 64 > 2 * cap ? n + 64 : 2 * cap;
	}
	if (r != NVML_SUCCESS) {
		free(info);
		return -1;
	}
	unsigned int self = (unsigned int)getpid();
	int rv = 0;
	*own = 0;
	*others = 0;
	for (unsigned int i = 0; i < n && i < cap; i++) {
		if (info[i].pid != self) {
			(*others)++;
		} else if (info[i].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE) {
			rv = -2;
		} else {
			*own = info[i].usedGpuMemory;
		}
	}
	free(info);
	return rv;
}

static void probe(const char *uuid)
{
	CUdevice dev;
	nvmlDevice_t h;
	unsigned long long before, after;
	unsigned int others;
	if (nv.byuuid(uuid, &h) != NVML_SUCCESS) {
		printf("%s error NVML does not know this GPU\n", uuid);
		return;
	}
	if (find_device(uuid, &dev) < 0) {
		printf("%s error the CUDA driver does not list this GPU\n", uuid);
		return;
	}
	if (usage(h, &before, &others) < 0) {
		printf("%s error NVML cannot list the GPU's processes\n", uuid);
		return;
	}
	if (others > 0) {
		printf("%s busy %u\n", uuid, others);
		return;
	}
	CUcontext ctx;
	CUresult r = cu.retain(&ctx, dev);
	if (r != CUDA_SUCCESS) {
		printf("%s error cuDevicePrimaryCtxRetain: error %d\n", uuid, (int)r);
		return;
	}
	int known = usage(h, &after, &others);
	cu.release(dev);
	if (known == -2)
		printf("%s error NVML gives no per-process memory figure on this GPU\n", uuid);
	else if (known < 0)
		printf("%s error NVML cannot list the GPU's processes\n", uuid);
	else
		printf("%s ok %llu\n", uuid, after > before ? after - before : 0ULL);
}

int main(int argc, char **argv)
{
	const char *cuda = "libcuda.so.1", *nvml = "libnvidia-ml.so.1";
	int i = 1;
	for (; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--cuda") == 0)
			cuda = argv[i + 1];
		else if (strcmp(argv[i], "--nvml") == 0)
			nvml = argv[i + 1];
		else
			break;
	}
	if (i >= argc || argv[i][0] == '-') {
		fprintf(stderr, "usage: gpuslice-ctxprobe [--cuda LIB] [--nvml LIB] UUID...\n");
		return 2;
	}
	if (load_nvml(nvml) < 0 || load_cuda(cuda) < 0)
		return 1;
	for (; i < argc; i++) {
		probe(argv[i]);
		fflush(stdout);
	}
	nv.shutdown();
	return 0;
}
