/*
 * NVML device queries beyond memory and processes: what nvidia-smi and
 * Slurm's GPU autodetection (gpu/nvml) ask about a device.
 */
#include "nvml.h"

#include "fc_internal.h"
#include "nvml_fc.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHECK_DEVICE(device)                            \
	do {                                            \
		if (!fc_nvml_ready())                   \
			return NVML_ERROR_UNINITIALIZED; \
		if (fc_nvml_dev(device) == NULL)        \
			return NVML_ERROR_INVALID_ARGUMENT; \
	} while (0)

/* nvml.h maps the name to the _v3 entry point; the v1 one is defined here. */
#undef nvmlDeviceGetPciInfo

/* The version 1 layout: a 16-byte bus id, then the numeric fields and four
 * reserved words. */
struct fc_nvml_pci_v1 {
	char busId[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	unsigned int reserved[4];
};

FC_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, struct fc_nvml_pci_v1 *pci)
{
	CHECK_DEVICE(device);
	if (pci == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlPciInfo_t v3;
	nvmlReturn_t rv = nvmlDeviceGetPciInfo_v3(device, &v3);
	if (rv != NVML_SUCCESS)
		return rv;
	memset(pci, 0, sizeof(*pci));
	memcpy(pci->busId, v3.busIdLegacy, sizeof(pci->busId));
	pci->domain = v3.domain;
	pci->bus = v3.bus;
	pci->device = v3.device;
	pci->pciDeviceId = v3.pciDeviceId;
	pci->pciSubSystemId = v3.pciSubSystemId;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(device, pci);
}

/*
 * A fakecuda GPU is attached to no particular CPU socket: its ideal affinity
 * is every CPU the machine has online (the real NVML reports the CPUs local to
 * the GPU's NUMA node; on a one-node machine that is all of them), as a bit
 * mask in cpuSetSize unsigned longs.
 */
FC_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
	CHECK_DEVICE(device);
	if (cpuSetSize == 0 || cpuSet == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
	const unsigned bits = 8 * sizeof(unsigned long);
	FILE *f = fopen("/sys/devices/system/cpu/online", "re");
	if (f != NULL) {
		unsigned a, b;
		char sep;
		int n;
		while ((n = fscanf(f, "%u", &a)) == 1) {
			b = a;
			if (fscanf(f, "%c", &sep) == 1 && sep == '-') {
				if (fscanf(f, "%u", &b) != 1)
					break;
				if (fscanf(f, "%c", &sep) != 1)
					sep = '\n';
			}
			for (unsigned c = a; c <= b && c / bits < cpuSetSize; c++)
				cpuSet[c / bits] |= 1UL << (c % bits);
			if (sep != ',')
				break;
		}
		fclose(f);
	} else {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		for (long c = 0; c < ncpu && (unsigned long)c / bits < cpuSetSize; c++)
			cpuSet[c / bits] |= 1UL << (c % bits);
	}
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
							unsigned long *cpuSet, unsigned int scope)
{
	if (scope > 1) /* NVML_AFFINITY_SCOPE_NODE, NVML_AFFINITY_SCOPE_SOCKET */
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmlDeviceGetCpuAffinity(device, cpuSetSize, cpuSet);
}

/* Not a MIG device, no MIG devices inside, no virtualization. */
FC_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	CHECK_DEVICE(device);
	if (isMigDevice == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*isMigDevice = 0;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	CHECK_DEVICE(device);
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = 0;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *mode)
{
	CHECK_DEVICE(device);
	if (mode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mode = 0; /* NVML_GPU_VIRTUALIZATION_MODE_NONE */
	return NVML_SUCCESS;
}

/* The compute mode a fresh GPU has: NVML_COMPUTEMODE_DEFAULT. */
FC_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode)
{
	CHECK_DEVICE(device);
	if (mode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mode = 0;
	return NVML_SUCCESS;
}

FC_HIDDEN void fc_nvml_proc_name(unsigned pid, char *name, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/exe", pid);
	ssize_t n = readlink(path, name, len - 1);
	if (n > 0) {
		name[n] = '\0';
		return;
	}
	name[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, name, len - 1);
	close(fd);
	if (n < 0)
		n = 0;
	while (n > 0 && name[n - 1] == '\n')
		n--;
	name[n] = '\0';
}

FC_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (name == NULL || length == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	fc_nvml_proc_name(pid, name, length);
	return name[0] == '\0' ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}
