/*
 * fakecuda's NVML (libnvidia-ml.so.1). It reads the same node-wide state as
 * the driver, so it reports what every process on the node holds (as
 * nvidia-smi does), and like the real NVML it lists physical devices in
 * physical order, ignoring CUDA_VISIBLE_DEVICES.
 */
#define __NVML_API_VERSION_INTERNAL 1
#include "nvml.h"

#include "fc_internal.h"
#include "nvml_fc.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct nvmlDevice_st {
	unsigned idx;
};

static struct nvmlDevice_st handles[FC_MAX_DEVICES];
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned refcount;

/* NVML opens /dev/nvidiactl and every /dev/nvidiaN at init
 * (FAKECUDA_DEVICE_NODES, devnodes.c). Without the control node it cannot
 * start: denied by a device cgroup, "Unknown Error" (what nvidia-smi prints
 * in a container whose device rules were lost); denied by the file's mode,
 * "Insufficient Permissions"; absent, the driver looks unloaded. A GPU
 * whose own node it could not open is still counted, but its handle is
 * refused (handle_allowed). */
static nvmlReturn_t nodes_status(void)
{
	const struct fc_devnodes *n = fc_devnodes();
	if (!n->enabled || n->ctl == FC_NODE_OK)
		return NVML_SUCCESS;
	switch (n->ctl) {
	case FC_NODE_DENIED_CGROUP:
		return NVML_ERROR_UNKNOWN;
	case FC_NODE_DENIED_MODE:
		return NVML_ERROR_NO_PERMISSION;
	default:
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
}

static nvmlReturn_t handle_of(unsigned idx, nvmlDevice_t *device)
{
	if (!fc_devnode_gpu_usable(idx))
		return NVML_ERROR_NO_PERMISSION;
	*device = &handles[idx];
	return NVML_SUCCESS;
}

static nvmlReturn_t init(void)
{
	nvmlReturn_t rv = NVML_SUCCESS;
	pthread_mutex_lock(&nvml_lock);
	if (fc_shm == NULL) {
		struct fc_config cfg;
		if (fc_config_load(&cfg) != 0)
			rv = NVML_ERROR_UNKNOWN;
		else if (fc_state_attach(&cfg) != 0)
			rv = NVML_ERROR_DRIVER_NOT_LOADED;
		for (unsigned i = 0; i < FC_MAX_DEVICES; i++)
			handles[i].idx = i;
	}
	if (rv == NVML_SUCCESS)
		rv = nodes_status();
	if (rv == NVML_SUCCESS)
		refcount++;
	pthread_mutex_unlock(&nvml_lock);
	return rv;
}

FC_API nvmlReturn_t nvmlInit_v2(void)
{
	return init();
}

FC_API nvmlReturn_t nvmlInit(void)
{
	return init();
}

FC_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
		return NVML_ERROR_INVALID_ARGUMENT;
	return init();
}

FC_API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t rv = NVML_SUCCESS;
	pthread_mutex_lock(&nvml_lock);
	if (refcount == 0)
		rv = NVML_ERROR_UNINITIALIZED;
	else
		refcount--; /* the state stays mapped: it is small and shared */
	pthread_mutex_unlock(&nvml_lock);
	return rv;
}

static bool ready(void)
{
	pthread_mutex_lock(&nvml_lock);
	bool r = refcount > 0;
	pthread_mutex_unlock(&nvml_lock);
	return r;
}

#define CHECK_READY()                                  \
	do {                                           \
		if (!ready())                          \
			return NVML_ERROR_UNINITIALIZED; \
	} while (0)

static struct fc_shm_dev *dev_of(nvmlDevice_t d)
{
	if (d < &handles[0] || d >= &handles[FC_MAX_DEVICES] || d->idx >= fc_shm->ndev)
		return NULL;
	return &fc_shm->dev[d->idx];
}

#define CHECK_DEV(d, info)                                    \
	CHECK_READY();                                        \
	struct fc_shm_dev *info = dev_of(d);                  \
	if (info == NULL)                                     \
		return NVML_ERROR_INVALID_ARGUMENT

FC_API const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
	case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
	case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	case NVML_ERROR_DEPRECATED: return "Deprecated";
	case NVML_ERROR_NOT_READY: return "Not ready";
	case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
	case NVML_ERROR_INVALID_STATE: return "Invalid state";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
	if (dst == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, strlen(src) + 1);
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	CHECK_READY();
	return copy_str(version, length, FC_NVIDIA_DRIVER);
}

FC_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	CHECK_READY();
	return copy_str(version, length, "12." FC_NVIDIA_DRIVER);
}

FC_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (cudaDriverVersion == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*cudaDriverVersion = FC_DRIVER_VERSION;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

FC_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	CHECK_READY();
	if (deviceCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = fc_shm->ndev;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return nvmlDeviceGetCount_v2(deviceCount);
}

FC_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	CHECK_READY();
	if (device == NULL || index >= fc_shm->ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	return handle_of(index, device);
}

FC_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FC_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	CHECK_READY();
	if (uuid == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < fc_shm->ndev; i++)
		if (strcasecmp(fc_shm->dev[i].uuid, uuid) == 0)
			return handle_of(i, device);
	return NVML_ERROR_NOT_FOUND;
}

FC_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	CHECK_READY();
	if (pciBusId == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned dom = 0, bus = 0, d = 0, fn = 0;
	if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &d, &fn) != 4)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < fc_shm->ndev; i++)
		if (dom == 0 && d == 0 && fn == 0 && fc_shm->dev[i].pci_bus == bus)
			return handle_of(i, device);
	return NVML_ERROR_NOT_FOUND;
}

FC_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	CHECK_DEV(device, info);
	(void)info;
	if (index == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = device->idx;
	return NVML_SUCCESS;
}

/* The N of /dev/nvidiaN: the device's index on the fake node. */
FC_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	return nvmlDeviceGetIndex(device, minorNumber);
}

FC_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	CHECK_DEV(device, info);
	return copy_str(name, length, info->name);
}

FC_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	CHECK_DEV(device, info);
	return copy_str(uuid, length, info->uuid);
}

FC_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	CHECK_DEV(device, info);
	if (pci == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(pci, 0, sizeof(*pci));
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", info->pci_bus);
	snprintf(pci->busId, sizeof(pci->busId), "%s", info->busid);
	pci->bus = info->pci_bus;
	pci->pciDeviceId = 0x20B210DE; /* device 0x20B2, vendor 0x10DE */
	pci->pciSubSystemId = 0x147F10DE;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	CHECK_DEV(device, info);
	(void)info;
	if (major == NULL || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = 8;
	*minor = 0;
	return NVML_SUCCESS;
}

/* Memory of dead processes is reclaimed before it is reported, as the kernel
 * driver frees a process's memory when it dies. Read from a process of a
 * cgroup with a memory limit (R615), total is capped to the hard limit and
 * free to the headroom under it. */
static void mem_of(const struct fc_shm_dev *d, unsigned long long *total, unsigned long long *used,
		   unsigned long long *free_bytes)
{
	(void)fc_state_sweep();
	uint64_t t, f;
	fc_lim_meminfo((unsigned)(d - fc_shm->dev), &t, &f);
	if (f > t)
		f = t;
	*total = t;
	*used = t - f;
	*free_bytes = f;
}

FC_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	CHECK_DEV(device, info);
	if (memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	mem_of(info, &memory->total, &memory->used, &memory->free);
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	CHECK_DEV(device, info);
	if (memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	mem_of(info, &memory->total, &memory->used, &memory->free);
	memory->reserved = 0; /* no memory is set aside for the driver here */
	return NVML_SUCCESS;
}

FC_HIDDEN bool fc_nvml_ready(void)
{
	return ready();
}

FC_HIDDEN struct fc_shm_dev *fc_nvml_dev(nvmlDevice_t device)
{
	return ready() ? dev_of(device) : NULL;
}

FC_HIDDEN nvmlDevice_t fc_nvml_handle(unsigned idx)
{
	return ready() && idx < fc_shm->ndev ? &handles[idx] : NULL;
}

FC_HIDDEN unsigned fc_nvml_index(nvmlDevice_t device)
{
	return device->idx;
}
