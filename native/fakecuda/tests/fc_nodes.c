/*
 * fc_nodes: what the driver and NVML make of the device nodes
 * (FAKECUDA_DEVICE_NODES): the devices CUDA enumerates, an allocation on
 * the first, the descriptors the process holds on the node directory, and
 * NVML's count and handles.
 *
 *   fc_nodes [--alloc SIZE]
 *
 *   event=init result=0 again=0
 *   event=device ordinal=0 uuid=GPU-...
 *   event=alloc bytes=... result=0
 *   event=fd name=nvidiactl cloexec=1          (one per descriptor open on the directory)
 *   event=nvml_init result=0
 *   event=nvml_count result=0 count=2
 *   event=nvml_handle index=0 result=0 uuid=GPU-...
 *   event=summary devices=N
 */
#include "common.h"
#include "drvctx.h"

#include "nvml.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>

static void list_fds(const char *dir)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL || dir == NULL)
		return;
	size_t dl = strlen(dir);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char path[300], target[4096];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strncmp(target, dir, dl) != 0 || target[dl] != '/')
			continue;
		int flags = fcntl(atoi(e->d_name), F_GETFD);
		printf("event=fd name=%s cloexec=%d\n", target + dl + 1, flags >= 0 && (flags & FD_CLOEXEC) ? 1 : 0);
	}
	closedir(d);
}

static void nvml(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (h == NULL) {
		printf("event=error op=dlopen_nvml\n");
		return;
	}
	nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
	nvmlReturn_t (*count)(unsigned *) = (nvmlReturn_t(*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
	nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *) =
		(nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned) =
		(nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned))dlsym(h, "nvmlDeviceGetUUID");
	nvmlReturn_t r = init();
	printf("event=nvml_init result=%d\n", (int)r);
	if (r != NVML_SUCCESS)
		return;
	unsigned n = 0;
	r = count(&n);
	printf("event=nvml_count result=%d count=%u\n", (int)r, n);
	for (unsigned i = 0; i < n; i++) {
		nvmlDevice_t d;
		char u[96] = "";
		r = byidx(i, &d);
		if (r == NVML_SUCCESS)
			uuid(d, u, sizeof(u));
		printf("event=nvml_handle index=%u result=%d uuid=%s\n", i, (int)r, u);
	}
}

int main(int argc, char **argv)
{
	uint64_t alloc_size = 0;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--alloc"))) {
			if (ex_parse_size(v, &alloc_size))
				return 2;
		} else {
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUresult r = cuInit(0);
	CUresult again = cuInit(0); /* the nodes are opened once per process */
	printf("event=init result=%d again=%d\n", (int)r, (int)again);
	int n = 0;
	if (r == CUDA_SUCCESS && cuDeviceGetCount(&n) != CUDA_SUCCESS)
		return 1;
	for (int i = 0; i < n; i++) {
		CUuuid u;
		if (cuDeviceGetUuid(&u, i) != CUDA_SUCCESS)
			return 1;
		const unsigned char *b = (const unsigned char *)u.bytes;
		printf("event=device ordinal=%d uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
		       i, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		       b[15]);
	}
	if (n > 0 && alloc_size > 0) {
		CUcontext c;
		CUdeviceptr p = 0;
		if (ex_driver_setup(0, &c))
			return 1;
		r = cuMemAlloc(&p, alloc_size);
		printf("event=alloc bytes=%llu result=%d\n", (unsigned long long)alloc_size, (int)r);
	}
	list_fds(getenv("FAKECUDA_DEVICE_NODES"));
	nvml();
	printf("event=summary devices=%d\n", n);
	return 0;
}
