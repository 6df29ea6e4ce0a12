/*
 * cuInit, versions, error strings, CUDA_VISIBLE_DEVICES and the device API.
 */
#include "drv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

FC_HIDDEN _Atomic int fc_ready;
FC_HIDDEN unsigned fc_nvisible;
FC_HIDDEN unsigned fc_visible[FC_MAX_DEVICES];

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult init_status = (CUresult)-1;

static void atfork_child(void)
{
	/* the child holds nothing yet; it takes a slot of its own on first use */
	if (fc_shm != NULL) {
		fc_state_after_fork();
		fc_lim_after_fork();
	}
}

__attribute__((destructor)) static void fc_driver_fini(void)
{
	fc_state_release_self();
}

FC_API CUresult cuInit(unsigned int Flags)
{
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (FC_LIKELY(atomic_load_explicit(&fc_ready, memory_order_acquire)))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&init_lock);
	if (init_status == (CUresult)-1) {
		struct fc_config cfg;
		if (fc_config_load(&cfg) != 0) {
			init_status = CUDA_ERROR_INVALID_VALUE;
		} else if (fc_state_attach(&cfg) != 0) {
			init_status = CUDA_ERROR_OPERATING_SYSTEM;
		} else {
			fc_state_register_self();
			pthread_atfork(NULL, NULL, atfork_child);
			init_status = fc_nodes_status();
			if (init_status == CUDA_SUCCESS) {
				fc_compute_visible();
				init_status = fc_nvisible ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
			}
			if (init_status == CUDA_SUCCESS)
				atomic_store_explicit(&fc_ready, 1, memory_order_release);
		}
	}
	CUresult rv = init_status;
	pthread_mutex_unlock(&init_lock);
	return rv;
}

FC_API CUresult cuDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = FC_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

/* ---- error names and strings ---- */
static const struct {
	CUresult code;
	const char *name;
	const char *text;
} errors[] = {
#define E(c, t) {c, #c, t}
	E(CUDA_SUCCESS, "no error"),
	E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
	E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized: call cudaProfilerInitialize()"),
	E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
	E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
	E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
	E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
	E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
	E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
	E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
	E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
	E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
	E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
	E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
	E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
	E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
	E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
	E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
	E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
	E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
	E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
	E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
	E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
	E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
	E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
	E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
	E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	E(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
	E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	E(CUDA_ERROR_NOT_READY, "device not ready"),
	E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
	E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
	E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
	E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
	E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
	E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
	E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
	E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
	E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
	E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
	E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
	E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
	E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
	E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
	E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
	E(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server"),
	E(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed"),
	E(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
	E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted"),
	E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted"),
	E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
	E(CUDA_ERROR_CDP_NOT_SUPPORTED, "is using CUDA Dynamic Parallelism, but the current configuration does not support it"),
	E(CUDA_ERROR_CDP_VERSION_MISMATCH, "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
	E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
	E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
	E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
	E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
	E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
	E(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
	E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
	E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
	E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
	E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
	E(CUDA_ERROR_UNKNOWN, "unknown error"),
#undef E
};

/* *pStr = the name (text == false) or the description of error. */
static CUresult error_lookup(CUresult error, const char **pStr, bool text)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error) {
			*pStr = text ? errors[i].text : errors[i].name;
			return CUDA_SUCCESS;
		}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	return error_lookup(error, pStr, false);
}

FC_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	return error_lookup(error, pStr, true);
}

/* ---- devices ---- */
FC_API CUresult cuDeviceGetCount(int *count)
{
	FC_CHECK_INIT();
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = (int)fc_nvisible;
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	FC_CHECK_INIT();
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

static struct fc_shm_dev *devinfo(CUdevice d)
{
	return &fc_shm->dev[fc_visible[d]];
}

FC_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	FC_CHECK_INIT();
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "%s", devinfo(dev)->name);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	FC_CHECK_INIT();
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	memcpy(uuid->bytes, devinfo(dev)->uuid_bytes, 16);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid(uuid, dev);
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	FC_CHECK_INIT();
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = devinfo(dev)->capacity;
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	FC_CHECK_INIT();
	if (major == NULL || minor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*major = 8;
	*minor = 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pciBusId == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", devinfo(dev)->pci_bus);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	FC_CHECK_INIT();
	if (dev == NULL || pciBusId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned dom = 0, bus = 0, d = 0, fn = 0;
	if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &d, &fn) != 4 &&
	    sscanf(pciBusId, "%x:%x.%x", &bus, &d, &fn) != 3)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < fc_nvisible; i++) {
		if (dom == 0 && d == 0 && fn == 0 && fc_shm->dev[fc_visible[i]].pci_bus == bus) {
			*dev = (CUdevice)i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

FC_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	FC_CHECK_INIT();
	if (canAccessPeer == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev) || !fc_valid_dev(peerDev))
		return CUDA_ERROR_INVALID_DEVICE;
	*canAccessPeer = dev != peerDev;
	return CUDA_SUCCESS;
}

/* An A100-like device (compute capability 8.0), with the capacity configured. */
FC_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	FC_CHECK_INIT();
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	int v;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1410000; break;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 108; break;
	case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: v = 512; break;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = (int)devinfo(dev)->pci_bus; break;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 1593000; break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 41943040; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 8; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 167936; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = (int)fc_visible[dev]; break;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: v = 2; break;
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 166912; break;
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: v = 31457280; break;
	case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: v = 134213632; break;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID: v = -1; break;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: v = -1; break;
	default:
		if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		v = 0; /* a capability the stand-in does not have */
	}
	*pi = v;
	return CUDA_SUCCESS;
}
