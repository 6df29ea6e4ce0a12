/*
 * Asks libnvidia-ml.so.1 what Slurm's gpu/nvml plugin and older NVML clients
 * ask about device 1, by exported name (dlsym), and prints:
 *   event=pci_v1 ret=0 busid=0000:11:00.0 bus=17 devid=0x20b210de v3_bus=17
 *   event=affinity ret=0 cpus=N
 *   event=mig ret=0 is_mig=0 max_ret=0 max=0
 *   event=compute_mode ret=0 mode=0
 *   event=events create=0 supported=0 types=0 register=0 wait=10 free=0
 * nvmlDeviceGetPciInfo is the v1 record (16-byte bus id, reserved words).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pci_v1 {
	char busId[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId, reserved[4];
};

struct pci_v3 {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
};

static void *lib;

static void *sym(const char *name)
{
	void *p = dlsym(lib, name);
	if (p == NULL) {
		fprintf(stderr, "%s: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

typedef int (*fn_void)(void);
typedef int (*fn_idx)(unsigned, void **);
typedef int (*fn_ptr)(void *, void *);
typedef int (*fn_affinity)(void *, unsigned, unsigned long *);
typedef int (*fn_register)(void *, unsigned long long, void *);
typedef int (*fn_wait)(void *, void *, unsigned);
typedef int (*fn_free)(void *);
typedef int (*fn_create)(void **);

int main(void)
{
	lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (lib == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void *dev = NULL;
	if (((fn_void)sym("nvmlInit_v2"))() != 0 || ((fn_idx)sym("nvmlDeviceGetHandleByIndex_v2"))(1, &dev) != 0) {
		fprintf(stderr, "NVML init failed\n");
		return 1;
	}

	struct pci_v1 a;
	struct pci_v3 b;
	memset(&a, 0xff, sizeof(a));
	int r1 = ((fn_ptr)sym("nvmlDeviceGetPciInfo"))(dev, &a);
	int r3 = ((fn_ptr)sym("nvmlDeviceGetPciInfo_v3"))(dev, &b);
	printf("event=pci_v1 ret=%d busid=%.15s bus=%u devid=0x%08x v3_ret=%d v3_bus=%u reserved=%u\n", r1, a.busId,
	       a.bus, a.pciDeviceId, r3, b.bus, a.reserved[0] | a.reserved[3]);

	unsigned long set[16];
	memset(set, 0, sizeof(set));
	int ra = ((fn_affinity)sym("nvmlDeviceGetCpuAffinity"))(dev, 16, set);
	int cpus = 0;
	for (int i = 0; i < 16; i++)
		cpus += __builtin_popcountl(set[i]);
	printf("event=affinity ret=%d cpus=%d\n", ra, cpus);

	unsigned is_mig = 7, max = 7;
	int rm = ((fn_ptr)sym("nvmlDeviceIsMigDeviceHandle"))(dev, &is_mig);
	int rx = ((fn_ptr)sym("nvmlDeviceGetMaxMigDeviceCount"))(dev, &max);
	printf("event=mig ret=%d is_mig=%u max_ret=%d max=%u\n", rm, is_mig, rx, max);

	unsigned mode = 7;
	int rc = ((fn_ptr)sym("nvmlDeviceGetComputeMode"))(dev, &mode);
	printf("event=compute_mode ret=%d mode=%u\n", rc, mode);

	void *set_h = NULL;
	unsigned long long types = 99;
	unsigned char data[64];
	int ec = ((fn_create)sym("nvmlEventSetCreate"))(&set_h);
	int es = ((fn_ptr)sym("nvmlDeviceGetSupportedEventTypes"))(dev, &types);
	int er = ((fn_register)sym("nvmlDeviceRegisterEvents"))(dev, 0, set_h);
	int ew = ((fn_wait)sym("nvmlEventSetWait_v2"))(set_h, data, 1);
	int ef = ((fn_free)sym("nvmlEventSetFree"))(set_h);
	printf("event=events create=%d supported=%d types=%llu register=%d wait=%d free=%d\n", ec, es, types, er, ew,
	       ef);
	return 0;
}
