/*
 * Calls the v1 nvmlDeviceGetPciInfo (the unsuffixed symbol, 16-byte bus id)
 * of libnvidia-ml.so.1 on device 0 and prints it next to the v3 record:
 *   event=pci_v1 busid=0000:10:00.0 bus=16 devid=0x20b210de v3_bus=16
 */
#include <dlfcn.h>
#include <stdio.h>

struct pci_v1 {
	char busId[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId, reserved[4];
};

struct pci_v3 {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
};

int main(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
	int (*byidx)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	int (*v1)(void *, struct pci_v1 *) = (int (*)(void *, struct pci_v1 *))dlsym(h, "nvmlDeviceGetPciInfo");
	int (*v3)(void *, struct pci_v3 *) = (int (*)(void *, struct pci_v3 *))dlsym(h, "nvmlDeviceGetPciInfo_v3");
	void *dev = NULL;
	struct pci_v1 a;
	struct pci_v3 b;
	if (!init || !byidx || !v1 || !v3 || init() != 0 || byidx(0, &dev) != 0) {
		fprintf(stderr, "NVML init failed\n");
		return 1;
	}
	int r1 = v1(dev, &a), r3 = v3(dev, &b);
	if (r1 != 0 || r3 != 0) {
		fprintf(stderr, "nvmlDeviceGetPciInfo: %d, _v3: %d\n", r1, r3);
		return 1;
	}
	printf("event=pci_v1 busid=%.16s bus=%u devid=0x%08x v3_bus=%u\n", a.busId, a.bus, a.pciDeviceId, b.bus);
	return 0;
}
