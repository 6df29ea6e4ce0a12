/*
 * nvml_query: what nvidia-smi shows, through NVML: every device with its
 * memory (nvmlDeviceGetMemoryInfo and _v2) and the processes using it with
 * their memory (nvmlDeviceGetComputeRunningProcesses).
 *
 *   nvml_query
 *
 * Output:
 *   event=system driver_version=560.35.03 cuda_version=12060 devices=2
 *   event=device index=0 uuid=GPU-... name="NVIDIA fakecuda GPU 80 GiB" pci=00000000:10:00.0
 *   event=memory index=0 total=... free=... used=...
 *   event=memory_v2 index=0 total=... reserved=0 free=... used=...
 *   event=process index=0 pid=1234 used=...
 *   event=summary devices=2 processes=1
 * Exit status: 0 on success, 1 on an NVML error.
 */
#include "common.h"

#include "nvml.h"

static int fail(const char *op, nvmlReturn_t r)
{
	printf("event=error op=%s error=\"%s\"\n", op, nvmlErrorString(r));
	return 1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	nvmlReturn_t r = nvmlInit();
	if (r != NVML_SUCCESS)
		return fail("init", r);
	char ver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
	int cuda = 0;
	unsigned n = 0;
	if ((r = nvmlSystemGetDriverVersion(ver, sizeof(ver))) != NVML_SUCCESS)
		return fail("driver_version", r);
	if ((r = nvmlSystemGetCudaDriverVersion(&cuda)) != NVML_SUCCESS)
		return fail("cuda_version", r);
	if ((r = nvmlDeviceGetCount(&n)) != NVML_SUCCESS)
		return fail("count", r);
	printf("event=system driver_version=%s cuda_version=%d devices=%u\n", ver, cuda, n);
	unsigned nproc = 0;
	for (unsigned i = 0; i < n; i++) {
		nvmlDevice_t d;
		char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
		nvmlPciInfo_t pci;
		if ((r = nvmlDeviceGetHandleByIndex(i, &d)) != NVML_SUCCESS)
			return fail("handle", r);
		if ((r = nvmlDeviceGetUUID(d, uuid, sizeof(uuid))) != NVML_SUCCESS)
			return fail("uuid", r);
		if ((r = nvmlDeviceGetName(d, name, sizeof(name))) != NVML_SUCCESS)
			return fail("name", r);
		if ((r = nvmlDeviceGetPciInfo(d, &pci)) != NVML_SUCCESS)
			return fail("pci", r);
		printf("event=device index=%u uuid=%s name=\"%s\" pci=%s\n", i, uuid, name, pci.busId);
		nvmlMemory_t m;
		if ((r = nvmlDeviceGetMemoryInfo(d, &m)) != NVML_SUCCESS)
			return fail("memory", r);
		printf("event=memory index=%u total=%llu free=%llu used=%llu\n", i, m.total, m.free, m.used);
		nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
		if ((r = nvmlDeviceGetMemoryInfo_v2(d, &m2)) != NVML_SUCCESS)
			return fail("memory_v2", r);
		printf("event=memory_v2 index=%u total=%llu reserved=%llu free=%llu used=%llu\n", i, m2.total, m2.reserved,
		       m2.free, m2.used);
		unsigned cnt = 0;
		nvmlProcessInfo_t *infos = NULL;
		r = nvmlDeviceGetComputeRunningProcesses(d, &cnt, NULL);
		while (r == NVML_ERROR_INSUFFICIENT_SIZE) {
			cnt += 4; /* room for processes that start meanwhile */
			free(infos);
			infos = calloc(cnt, sizeof(*infos));
			r = nvmlDeviceGetComputeRunningProcesses(d, &cnt, infos);
		}
		if (r != NVML_SUCCESS)
			return fail("processes", r);
		for (unsigned k = 0; k < cnt; k++)
			printf("event=process index=%u pid=%u used=%llu\n", i, infos[k].pid, infos[k].usedGpuMemory);
		nproc += cnt;
		free(infos);
	}
	printf("event=summary devices=%u processes=%u\n", n, nproc);
	nvmlShutdown();
	return 0;
}
