/*
 * fc_probe: prints what the driver shows this process (device list after
 * CUDA_VISIBLE_DEVICES), optionally after allocating on one ordinal.
 *
 *   fc_probe [--alloc ORDINAL:SIZE] [--hold SECONDS]
 *
 *   event=init result=0
 *   event=device ordinal=0 uuid=GPU-... pci=0000:12:00.0 total=... name="..."
 *   event=alloc ordinal=0 bytes=... result=0
 *   event=summary devices=N
 */
#include "common.h"
#include "drvctx.h"

int main(int argc, char **argv)
{
	long alloc_ord = -1;
	uint64_t alloc_size = 0;
	double hold = 0;
	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = ex_opt(argc, argv, &i, "--alloc"))) {
			char *colon = strchr(v, ':');
			if (colon == NULL || ex_parse_size(colon + 1, &alloc_size))
				return 2;
			alloc_ord = strtol(v, NULL, 10);
		} else if ((v = ex_opt(argc, argv, &i, "--hold"))) {
			hold = strtod(v, NULL);
		} else {
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUresult r = cuInit(0);
	printf("event=init result=%d pid=%d\n", (int)r, (int)getpid());
	if (r != CUDA_SUCCESS)
		return 0;
	int n = 0;
	if ((r = cuDeviceGetCount(&n)) != CUDA_SUCCESS)
		return 1;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CUuuid u;
		char pci[32], name[128], us[48];
		size_t total;
		if (cuDeviceGet(&d, i) || cuDeviceGetUuid(&u, d) || cuDeviceGetPCIBusId(pci, sizeof(pci), d) ||
		    cuDeviceTotalMem(&total, d) || cuDeviceGetName(name, sizeof(name), d))
			return 1;
		const unsigned char *b = (const unsigned char *)u.bytes;
		snprintf(us, sizeof(us), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
			 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
		printf("event=device ordinal=%d uuid=%s pci=%s total=%zu name=\"%s\"\n", i, us, pci, total, name);
	}
	if (alloc_ord >= 0) {
		CUcontext c;
		CUdeviceptr p = 0;
		if (ex_driver_setup((int)alloc_ord, &c))
			return 1;
		r = cuMemAlloc(&p, alloc_size);
		printf("event=alloc ordinal=%ld bytes=%llu result=%d\n", alloc_ord, (unsigned long long)alloc_size, (int)r);
		if (hold > 0) {
			printf("event=hold seconds=%g\n", hold);
			ex_sleep_s(hold);
		}
	}
	printf("event=summary devices=%d\n", n);
	return 0;
}
