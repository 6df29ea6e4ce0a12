/*
 * gpuslice: CUDA driver API declarations (CUDA 12.6 ABI) for the fakecuda
 * stand-in driver, the interceptor and the example programs.
 *
 * Written for this project from the documented ABI: numeric values, struct
 * layouts and exported symbol names match the CUDA 12.6 driver, but only the
 * part of the API that gpuslice models is declared here. Everything else in
 * the driver surface exists as an exported symbol of fakecuda's libcuda.so.1
 * (see native/fakecuda/entry-points.tsv) without a prototype in this header.
 *
 * Prototypes are written under their exported names (cuMemAlloc_v2, ...).
 * At the end of the file the usual source-level renames map the plain names
 * to them (cuMemAlloc -> cuMemAlloc_v2; with CUDA_API_PER_THREAD_DEFAULT_STREAM
 * the stream-ordered calls map to their _ptds/_ptsz symbols). Define
 * __CUDA_API_VERSION_INTERNAL before including this header to suppress the
 * renames (needed by code that defines the legacy, un-suffixed entry points).
 */
#ifndef GPUSLICE_CUDA_H
#define GPUSLICE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_VERSION 12060
#define CUDAAPI

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUtexref_st *CUtexref;
typedef struct CUsurfref_st *CUsurfref;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraphicsResource_st *CUgraphicsResource;
typedef struct CUextMemory_st *CUexternalMemory;
typedef struct CUextSemaphore_st *CUexternalSemaphore;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUuserObject_st *CUuserObject;
typedef struct CUlinkState_st *CUlinkState;
typedef unsigned long long CUtexObject_v1;
typedef CUtexObject_v1 CUtexObject;
typedef unsigned long long CUsurfObject_v1;
typedef CUsurfObject_v1 CUsurfObject;
typedef unsigned long long CUmemGenericAllocationHandle_v1;
typedef CUmemGenericAllocationHandle_v1 CUmemGenericAllocationHandle;

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

/* ---- result codes ---- */
typedef enum cudaError_enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_PROFILER_DISABLED = 5,
	CUDA_ERROR_PROFILER_NOT_INITIALIZED = 6,
	CUDA_ERROR_PROFILER_ALREADY_STARTED = 7,
	CUDA_ERROR_PROFILER_ALREADY_STOPPED = 8,
	CUDA_ERROR_STUB_LIBRARY = 34,
	CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_DEVICE_NOT_LICENSED = 102,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202,
	CUDA_ERROR_MAP_FAILED = 205,
	CUDA_ERROR_UNMAP_FAILED = 206,
	CUDA_ERROR_ARRAY_IS_MAPPED = 207,
	CUDA_ERROR_ALREADY_MAPPED = 208,
	CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
	CUDA_ERROR_ALREADY_ACQUIRED = 210,
	CUDA_ERROR_NOT_MAPPED = 211,
	CUDA_ERROR_NOT_MAPPED_AS_ARRAY = 212,
	CUDA_ERROR_NOT_MAPPED_AS_POINTER = 213,
	CUDA_ERROR_ECC_UNCORRECTABLE = 214,
	CUDA_ERROR_UNSUPPORTED_LIMIT = 215,
	CUDA_ERROR_CONTEXT_ALREADY_IN_USE = 216,
	CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
	CUDA_ERROR_INVALID_PTX = 218,
	CUDA_ERROR_INVALID_GRAPHICS_CONTEXT = 219,
	CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
	CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
	CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
	CUDA_ERROR_JIT_COMPILATION_DISABLED = 223,
	CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY = 224,
	CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC = 225,
	CUDA_ERROR_INVALID_SOURCE = 300,
	CUDA_ERROR_FILE_NOT_FOUND = 301,
	CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302,
	CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303,
	CUDA_ERROR_OPERATING_SYSTEM = 304,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_LOSSY_QUERY = 402,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
	CUDA_ERROR_LAUNCH_TIMEOUT = 702,
	CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING = 703,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
	CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
	CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
	CUDA_ERROR_ASSERT = 710,
	CUDA_ERROR_TOO_MANY_PEERS = 711,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
	CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
	CUDA_ERROR_MISALIGNED_ADDRESS = 716,
	CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
	CUDA_ERROR_INVALID_PC = 718,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_SYSTEM_NOT_READY = 802,
	CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
	CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
	CUDA_ERROR_MPS_CONNECTION_FAILED = 805,
	CUDA_ERROR_MPS_RPC_FAILURE = 806,
	CUDA_ERROR_MPS_SERVER_NOT_READY = 807,
	CUDA_ERROR_MPS_MAX_CLIENTS_REACHED = 808,
	CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED = 809,
	CUDA_ERROR_MPS_CLIENT_TERMINATED = 810,
	CUDA_ERROR_CDP_NOT_SUPPORTED = 811,
	CUDA_ERROR_CDP_VERSION_MISMATCH = 812,
	CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
	CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
	CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
	CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
	CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
	CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
	CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
	CUDA_ERROR_CAPTURED_EVENT = 907,
	CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
	CUDA_ERROR_TIMEOUT = 909,
	CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910,
	CUDA_ERROR_EXTERNAL_DEVICE = 911,
	CUDA_ERROR_INVALID_CLUSTER_SIZE = 912,
	CUDA_ERROR_FUNCTION_NOT_LOADED = 913,
	CUDA_ERROR_INVALID_RESOURCE_TYPE = 914,
	CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915,
	CUDA_ERROR_UNKNOWN = 999
} CUresult;

/* ---- cuGetProcAddress ---- */
typedef enum CUdriverProcAddress_flags_enum {
	CU_GET_PROC_ADDRESS_DEFAULT = 0,
	CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
	CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
	CU_GET_PROC_ADDRESS_SUCCESS = 0,
	CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ---- context, stream, event flags ---- */
typedef enum CUctx_flags_enum {
	CU_CTX_SCHED_AUTO = 0x00,
	CU_CTX_SCHED_SPIN = 0x01,
	CU_CTX_SCHED_YIELD = 0x02,
	CU_CTX_SCHED_BLOCKING_SYNC = 0x04,
	CU_CTX_BLOCKING_SYNC = 0x04,
	CU_CTX_SCHED_MASK = 0x07,
	CU_CTX_MAP_HOST = 0x08,
	CU_CTX_LMEM_RESIZE_TO_MAX = 0x10,
	CU_CTX_COREDUMP_ENABLE = 0x20,
	CU_CTX_USER_COREDUMP_ENABLE = 0x40,
	CU_CTX_SYNC_MEMOPS = 0x80,
	CU_CTX_FLAGS_MASK = 0xFF
} CUctx_flags;

typedef enum CUstream_flags_enum {
	CU_STREAM_DEFAULT = 0x0,
	CU_STREAM_NON_BLOCKING = 0x1
} CUstream_flags;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum CUevent_flags_enum {
	CU_EVENT_DEFAULT = 0x0,
	CU_EVENT_BLOCKING_SYNC = 0x1,
	CU_EVENT_DISABLE_TIMING = 0x2,
	CU_EVENT_INTERPROCESS = 0x4
} CUevent_flags;

typedef enum CUevent_record_flags_enum {
	CU_EVENT_RECORD_DEFAULT = 0x0,
	CU_EVENT_RECORD_EXTERNAL = 0x1
} CUevent_record_flags;

typedef enum CUevent_wait_flags_enum {
	CU_EVENT_WAIT_DEFAULT = 0x0,
	CU_EVENT_WAIT_EXTERNAL = 0x1
} CUevent_wait_flags;

typedef enum CUlimit_enum {
	CU_LIMIT_STACK_SIZE = 0x00,
	CU_LIMIT_PRINTF_FIFO_SIZE = 0x01,
	CU_LIMIT_MALLOC_HEAP_SIZE = 0x02,
	CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH = 0x03,
	CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT = 0x04,
	CU_LIMIT_MAX_L2_FETCH_GRANULARITY = 0x05,
	CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06,
	CU_LIMIT_SHMEM_SIZE = 0x07,
	CU_LIMIT_CIG_ENABLED = 0x08,
	CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED = 0x09,
	CU_LIMIT_MAX
} CUlimit;

typedef enum CUfunc_cache_enum {
	CU_FUNC_CACHE_PREFER_NONE = 0x00,
	CU_FUNC_CACHE_PREFER_SHARED = 0x01,
	CU_FUNC_CACHE_PREFER_L1 = 0x02,
	CU_FUNC_CACHE_PREFER_EQUAL = 0x03
} CUfunc_cache;

typedef enum CUfunction_attribute_enum {
	CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
	CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
	CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
	CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
	CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
	CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
	CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
	CU_FUNC_ATTRIBUTE_CACHE_MODE_CA = 7,
	CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
	CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
	CU_FUNC_ATTRIBUTE_MAX
} CUfunction_attribute;

typedef enum CUjit_option_enum {
	CU_JIT_MAX_REGISTERS = 0,
	CU_JIT_THREADS_PER_BLOCK = 1,
	CU_JIT_WALL_TIME = 2,
	CU_JIT_INFO_LOG_BUFFER = 3,
	CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
	CU_JIT_ERROR_LOG_BUFFER = 5,
	CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
	CU_JIT_OPTIMIZATION_LEVEL = 7,
	CU_JIT_TARGET_FROM_CUCONTEXT = 8,
	CU_JIT_TARGET = 9,
	CU_JIT_FALLBACK_STRATEGY = 10,
	CU_JIT_GENERATE_DEBUG_INFO = 11,
	CU_JIT_LOG_VERBOSE = 12,
	CU_JIT_GENERATE_LINE_INFO = 13,
	CU_JIT_CACHE_MODE = 14
} CUjit_option;

/* ---- device attributes (the ones fakecuda reports; numbering is the driver's) ---- */
typedef enum CUdevice_attribute_enum {
	CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
	CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
	CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
	CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
	CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
	CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
	CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
	CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
	CU_DEVICE_ATTRIBUTE_SHARED_MEMORY_PER_BLOCK = 8,
	CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
	CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
	CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11,
	CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
	CU_DEVICE_ATTRIBUTE_REGISTERS_PER_BLOCK = 12,
	CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
	CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14,
	CU_DEVICE_ATTRIBUTE_GPU_OVERLAP = 15,
	CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT = 17,
	CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
	CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
	CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH = 21,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH = 22,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT = 23,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH = 24,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT = 25,
	CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH = 26,
	CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT = 30,
	CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
	CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32,
	CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
	CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
	CU_DEVICE_ATTRIBUTE_TCC_DRIVER = 35,
	CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
	CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
	CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
	CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
	CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
	CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
	CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED = 78,
	CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED = 79,
	CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED = 80,
	CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
	CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
	CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
	CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD = 84,
	CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID = 85,
	CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED = 86,
	CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO = 87,
	CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS = 88,
	CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
	CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED = 90,
	CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
	CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
	CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH = 96,
	CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
	CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES = 98,
	CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED = 99,
	CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES = 100,
	CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST = 101,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED = 104,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED = 105,
	CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
	CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED = 107,
	CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108,
	CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE = 109,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
	CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111,
	CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED = 112,
	CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 113,
	CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED = 114,
	CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS = 117,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING = 118,
	CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = 119,
	CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120,
	CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED = 121,
	CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
	CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR = 123,
	CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
	CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED = 125,
	CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT = 126,
	CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED = 127,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED = 128,
	CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS = 129,
	CU_DEVICE_ATTRIBUTE_NUMA_CONFIG = 130,
	CU_DEVICE_ATTRIBUTE_NUMA_ID = 131,
	CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132,
	CU_DEVICE_ATTRIBUTE_MPS_ENABLED = 133,
	CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID = 134,
	CU_DEVICE_ATTRIBUTE_MAX
} CUdevice_attribute;

typedef enum CUcomputemode_enum {
	CU_COMPUTEMODE_DEFAULT = 0,
	CU_COMPUTEMODE_PROHIBITED = 2,
	CU_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
} CUcomputemode;

/* ---- memory ---- */
typedef enum CUmemorytype_enum {
	CU_MEMORYTYPE_HOST = 0x01,
	CU_MEMORYTYPE_DEVICE = 0x02,
	CU_MEMORYTYPE_ARRAY = 0x03,
	CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;

typedef enum CUmemAttach_flags_enum {
	CU_MEM_ATTACH_GLOBAL = 0x1,
	CU_MEM_ATTACH_HOST = 0x2,
	CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08

typedef enum CUpointer_attribute_enum {
	CU_POINTER_ATTRIBUTE_CONTEXT = 1,
	CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
	CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
	CU_POINTER_ATTRIBUTE_P2P_TOKENS = 5,
	CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
	CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
	CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
	CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
	CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
	CU_POINTER_ATTRIBUTE_MAPPED = 13,
	CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14,
	CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE = 15,
	CU_POINTER_ATTRIBUTE_ACCESS_FLAGS = 16,
	CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17,
	CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
	CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
	CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID = 20
} CUpointer_attribute;

/* virtual memory management */
typedef enum CUmemLocationType_enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
	CU_MEM_LOCATION_TYPE_HOST = 0x2,
	CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
	CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
	CU_MEM_LOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
	CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
	CU_MEM_ALLOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
	CU_MEM_HANDLE_TYPE_WIN32 = 0x2,
	CU_MEM_HANDLE_TYPE_WIN32_KMT = 0x4,
	CU_MEM_HANDLE_TYPE_FABRIC = 0x8,
	CU_MEM_HANDLE_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef enum CUmemAccess_flags_enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
	CU_MEM_ACCESS_FLAGS_PROT_MAX = 0x7FFFFFFF
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

typedef enum CUmemAllocationCompType_enum {
	CU_MEM_ALLOCATION_COMP_NONE = 0x0,
	CU_MEM_ALLOCATION_COMP_GENERIC = 0x1
} CUmemAllocationCompType;

typedef struct CUmemLocation_st {
	CUmemLocationType type;
	int id;
} CUmemLocation_v1;
typedef CUmemLocation_v1 CUmemLocation;

typedef struct CUmemAllocationProp_st {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp_v1;
typedef CUmemAllocationProp_v1 CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc_v1;
typedef CUmemAccessDesc_v1 CUmemAccessDesc;

/* stream-ordered allocator / memory pools */
typedef enum CUmemPool_attribute_enum {
	CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
	CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
	CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
	CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
	CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
	CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
	CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
	CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
} CUmemPool_attribute;

typedef struct CUmemPoolProps_st {
	CUmemAllocationType allocType;
	CUmemAllocationHandleType handleTypes;
	CUmemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps_v1;
typedef CUmemPoolProps_v1 CUmemPoolProps;

/* arrays */
typedef enum CUarray_format_enum {
	CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
	CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
	CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
	CU_AD_FORMAT_SIGNED_INT8 = 0x08,
	CU_AD_FORMAT_SIGNED_INT16 = 0x09,
	CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
	CU_AD_FORMAT_HALF = 0x10,
	CU_AD_FORMAT_FLOAT = 0x20,
	CU_AD_FORMAT_NV12 = 0xb0,
	CU_AD_FORMAT_UNORM_INT8X1 = 0xc0,
	CU_AD_FORMAT_UNORM_INT8X2 = 0xc1,
	CU_AD_FORMAT_UNORM_INT8X4 = 0xc2,
	CU_AD_FORMAT_UNORM_INT16X1 = 0xc3,
	CU_AD_FORMAT_UNORM_INT16X2 = 0xc4,
	CU_AD_FORMAT_UNORM_INT16X4 = 0xc5,
	CU_AD_FORMAT_SNORM_INT8X1 = 0xc6,
	CU_AD_FORMAT_SNORM_INT8X2 = 0xc7,
	CU_AD_FORMAT_SNORM_INT8X4 = 0xc8,
	CU_AD_FORMAT_SNORM_INT16X1 = 0xc9,
	CU_AD_FORMAT_SNORM_INT16X2 = 0xca,
	CU_AD_FORMAT_SNORM_INT16X4 = 0xcb,
	CU_AD_FORMAT_BC1_UNORM = 0x91,
	CU_AD_FORMAT_BC1_UNORM_SRGB = 0x92,
	CU_AD_FORMAT_BC2_UNORM = 0x93,
	CU_AD_FORMAT_BC2_UNORM_SRGB = 0x94,
	CU_AD_FORMAT_BC3_UNORM = 0x95,
	CU_AD_FORMAT_BC3_UNORM_SRGB = 0x96,
	CU_AD_FORMAT_BC4_UNORM = 0x97,
	CU_AD_FORMAT_BC4_SNORM = 0x98,
	CU_AD_FORMAT_BC5_UNORM = 0x99,
	CU_AD_FORMAT_BC5_SNORM = 0x9a,
	CU_AD_FORMAT_BC6H_UF16 = 0x9b,
	CU_AD_FORMAT_BC6H_SF16 = 0x9c,
	CU_AD_FORMAT_BC7_UNORM = 0x9d,
	CU_AD_FORMAT_BC7_UNORM_SRGB = 0x9e
} CUarray_format;

#define CUDA_ARRAY3D_LAYERED 0x01
#define CUDA_ARRAY3D_2DARRAY 0x01
#define CUDA_ARRAY3D_SURFACE_LDST 0x02
#define CUDA_ARRAY3D_CUBEMAP 0x04
#define CUDA_ARRAY3D_TEXTURE_GATHER 0x08

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
	size_t Width;
	size_t Height;
	CUarray_format Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v2;
typedef CUDA_ARRAY_DESCRIPTOR_v2 CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
	size_t Width;
	size_t Height;
	size_t Depth;
	CUarray_format Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v2;
typedef CUDA_ARRAY3D_DESCRIPTOR_v2 CUDA_ARRAY3D_DESCRIPTOR;

/* copies */
typedef struct CUDA_MEMCPY2D_st {
	size_t srcXInBytes;
	size_t srcY;
	CUmemorytype srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	CUarray srcArray;
	size_t srcPitch;
	size_t dstXInBytes;
	size_t dstY;
	CUmemorytype dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	CUarray dstArray;
	size_t dstPitch;
	size_t WidthInBytes;
	size_t Height;
} CUDA_MEMCPY2D_v2;
typedef CUDA_MEMCPY2D_v2 CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {
	size_t srcXInBytes;
	size_t srcY;
	size_t srcZ;
	size_t srcLOD;
	CUmemorytype srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	CUarray srcArray;
	void *reserved0;
	size_t srcPitch;
	size_t srcHeight;
	size_t dstXInBytes;
	size_t dstY;
	size_t dstZ;
	size_t dstLOD;
	CUmemorytype dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	CUarray dstArray;
	void *reserved1;
	size_t dstPitch;
	size_t dstHeight;
	size_t WidthInBytes;
	size_t Height;
	size_t Depth;
} CUDA_MEMCPY3D_v2;
typedef CUDA_MEMCPY3D_v2 CUDA_MEMCPY3D;

/* callbacks */
typedef void (CUDAAPI *CUstreamCallback)(CUstream hStream, CUresult status, void *userData);
typedef void (CUDAAPI *CUhostFn)(void *userData);

/* ====================================================================== */
/* Prototypes of the entry points fakecuda models, under exported names.   */
/* ====================================================================== */

/* initialization, version, errors, entry-point lookup */
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion);
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr);
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
/*
 * The exported symbol cuGetProcAddress is the CUDA 11.3 entry point with 4
 * arguments (PFN_cuGetProcAddress_v11030); source that calls cuGetProcAddress
 * links cuGetProcAddress_v2 (5 arguments) through the renames below. Code that
 * defines or declares the 4-argument symbol itself defines
 * __CUDA_API_VERSION_INTERNAL (see the end of this file).
 */
typedef CUresult(CUDAAPI *PFN_cuGetProcAddress_v11030)(const char *symbol, void **pfn, int cudaVersion,
							cuuint64_t flags);
typedef CUresult(CUDAAPI *PFN_cuGetProcAddress_v12000)(const char *symbol, void **pfn, int cudaVersion,
							cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus);

/* devices */
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal);
CUresult CUDAAPI cuDeviceGetCount(int *count);
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev);
CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev);
CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId);
CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);
CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);

/* primary contexts */
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev);

/* contexts */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx);
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx);
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx);
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device);
CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags);
CUresult CUDAAPI cuCtxSetFlags(unsigned int flags);
CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId);
CUresult CUDAAPI cuCtxSynchronize(void);
CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version);
CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value);
CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit);
CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *pconfig);
CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config);
CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority);

/* device memory */
CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				    unsigned int ElementSizeBytes);
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr);
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);

/* host memory (page-locked in a real driver; never charged to a device) */
CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult CUDAAPI cuMemFreeHost(void *p);
CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p);
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult CUDAAPI cuMemHostUnregister(void *p);

/* stream-ordered allocation and memory pools */
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					      CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool);
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location);

/* virtual memory management */
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags);
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				     unsigned long long flags);
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			  unsigned long long flags);
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr);
CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option);
CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							 CUmemGenericAllocationHandle handle);
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);

/* arrays */
CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray);
CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray);
CUresult CUDAAPI cuArrayDestroy(CUarray hArray);
CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
					unsigned int numMipmapLevels);
CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level);
CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);

/*
 * Copies and memsets. Each stream-ordered or synchronous call below also
 * exists as a per-thread-default-stream symbol with the same signature
 * (suffix _ptds for synchronous calls, _ptsz for calls taking a stream).
 */
#define GPUSLICE_CU_COPY_DECLS(PT, PA)                                                                         \
	CUresult CUDAAPI cuMemcpy##PT(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);                     \
	CUresult CUDAAPI cuMemcpyPeer##PT(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,  \
					  CUcontext srcContext, size_t ByteCount);                             \
	CUresult CUDAAPI cuMemcpyHtoD_v2##PT(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);    \
	CUresult CUDAAPI cuMemcpyDtoH_v2##PT(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);          \
	CUresult CUDAAPI cuMemcpyDtoD_v2##PT(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);  \
	CUresult CUDAAPI cuMemcpyDtoA_v2##PT(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,        \
					     size_t ByteCount);                                                \
	CUresult CUDAAPI cuMemcpyAtoD_v2##PT(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,        \
					     size_t ByteCount);                                                \
	CUresult CUDAAPI cuMemcpyHtoA_v2##PT(CUarray dstArray, size_t dstOffset, const void *srcHost,          \
					     size_t ByteCount);                                                \
	CUresult CUDAAPI cuMemcpyAtoH_v2##PT(void *dstHost, CUarray srcArray, size_t srcOffset,                \
					     size_t ByteCount);                                                \
	CUresult CUDAAPI cuMemcpyAtoA_v2##PT(CUarray dstArray, size_t dstOffset, CUarray srcArray,             \
					     size_t srcOffset, size_t ByteCount);                              \
	CUresult CUDAAPI cuMemcpy2D_v2##PT(const CUDA_MEMCPY2D *pCopy);                                        \
	CUresult CUDAAPI cuMemcpy2DUnaligned_v2##PT(const CUDA_MEMCPY2D *pCopy);                               \
	CUresult CUDAAPI cuMemcpy3D_v2##PT(const CUDA_MEMCPY3D *pCopy);                                        \
	CUresult CUDAAPI cuMemsetD8_v2##PT(CUdeviceptr dstDevice, unsigned char uc, size_t N);                 \
	CUresult CUDAAPI cuMemsetD16_v2##PT(CUdeviceptr dstDevice, unsigned short us, size_t N);               \
	CUresult CUDAAPI cuMemsetD32_v2##PT(CUdeviceptr dstDevice, unsigned int ui, size_t N);                 \
	CUresult CUDAAPI cuMemsetD2D8_v2##PT(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,         \
					     size_t Width, size_t Height);                                     \
	CUresult CUDAAPI cuMemsetD2D16_v2##PT(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,       \
					      size_t Width, size_t Height);                                    \
	CUresult CUDAAPI cuMemsetD2D32_v2##PT(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,         \
					      size_t Width, size_t Height);                                    \
	CUresult CUDAAPI cuMemcpyAsync##PA(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream); \
	CUresult CUDAAPI cuMemcpyPeerAsync##PA(CUdeviceptr dstDevice, CUcontext dstContext,                    \
					       CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,  \
					       CUstream hStream);                                              \
	CUresult CUDAAPI cuMemcpyHtoDAsync_v2##PA(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, \
						  CUstream hStream);                                           \
	CUresult CUDAAPI cuMemcpyDtoHAsync_v2##PA(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,      \
						  CUstream hStream);                                           \
	CUresult CUDAAPI cuMemcpyDtoDAsync_v2##PA(CUdeviceptr dstDevice, CUdeviceptr srcDevice,                \
						  size_t ByteCount, CUstream hStream);                         \
	CUresult CUDAAPI cuMemcpyHtoAAsync_v2##PA(CUarray dstArray, size_t dstOffset, const void *srcHost,     \
						  size_t ByteCount, CUstream hStream);                         \
	CUresult CUDAAPI cuMemcpyAtoHAsync_v2##PA(void *dstHost, CUarray srcArray, size_t srcOffset,           \
						  size_t ByteCount, CUstream hStream);                         \
	CUresult CUDAAPI cuMemcpy2DAsync_v2##PA(const CUDA_MEMCPY2D *pCopy, CUstream hStream);                 \
	CUresult CUDAAPI cuMemcpy3DAsync_v2##PA(const CUDA_MEMCPY3D *pCopy, CUstream hStream);                 \
	CUresult CUDAAPI cuMemsetD8Async##PA(CUdeviceptr dstDevice, unsigned char uc, size_t N,                \
					     CUstream hStream);                                                \
	CUresult CUDAAPI cuMemsetD16Async##PA(CUdeviceptr dstDevice, unsigned short us, size_t N,              \
					      CUstream hStream);                                               \
	CUresult CUDAAPI cuMemsetD32Async##PA(CUdeviceptr dstDevice, unsigned int ui, size_t N,                \
					      CUstream hStream);                                               \
	CUresult CUDAAPI cuMemsetD2D8Async##PA(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,       \
					       size_t Width, size_t Height, CUstream hStream);                 \
	CUresult CUDAAPI cuMemsetD2D16Async##PA(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,     \
						size_t Width, size_t Height, CUstream hStream);                \
	CUresult CUDAAPI cuMemsetD2D32Async##PA(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,       \
						size_t Width, size_t Height, CUstream hStream);

GPUSLICE_CU_COPY_DECLS(, )
GPUSLICE_CU_COPY_DECLS(_ptds, _ptsz)

/* streams (each also has a _ptsz symbol where listed in entry-points.tsv) */
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamQuery(CUstream hStream);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags);
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags);
CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority);
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream, int *priority);
CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx);
CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId);
CUresult CUDAAPI cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId);
CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags);
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
					  unsigned int flags);
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);

/* events */
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult CUDAAPI cuEventQuery(CUevent hEvent);
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent);
CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);

/* modules, functions, launches (accepted; no code runs) */
CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname);
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image);
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
				    CUjit_option *options, void **optionValues);
CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin);
CUresult CUDAAPI cuModuleUnload(CUmodule hmod);
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config);
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
				     void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					   void **kernelParams);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
						unsigned int gridDimZ, unsigned int blockDimX,
						unsigned int blockDimY, unsigned int blockDimZ,
						unsigned int sharedMemBytes, CUstream hStream,
						void **kernelParams);

/* ====================================================================== */
/* Source-level renames (one line per entry of entry-points.tsv whose      */
/* linked symbol differs from the name written in source).                 */
/* ====================================================================== */
#if defined(__CUDA_API_VERSION_INTERNAL)
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#else
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define __CUDA_API_PTDS(api) api##_ptds
#define __CUDA_API_PTSZ(api) api##_ptsz
#else
#define __CUDA_API_PTDS(api) api
#define __CUDA_API_PTSZ(api) api
#endif
#define cuArray3DCreate cuArray3DCreate_v2
#define cuArray3DGetDescriptor cuArray3DGetDescriptor_v2
#define cuArrayCreate cuArrayCreate_v2
#define cuArrayGetDescriptor cuArrayGetDescriptor_v2
#define cuCtxCreate cuCtxCreate_v2
#define cuCtxDestroy cuCtxDestroy_v2
#define cuCtxPopCurrent cuCtxPopCurrent_v2
#define cuCtxPushCurrent cuCtxPushCurrent_v2
#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
#define cuDevicePrimaryCtxReset cuDevicePrimaryCtxReset_v2
#define cuDevicePrimaryCtxSetFlags cuDevicePrimaryCtxSetFlags_v2
#define cuDeviceTotalMem cuDeviceTotalMem_v2
#define cuEventDestroy cuEventDestroy_v2
#define cuEventRecord __CUDA_API_PTSZ(cuEventRecord)
#define cuEventRecordWithFlags __CUDA_API_PTSZ(cuEventRecordWithFlags)
#define cuGetProcAddress cuGetProcAddress_v2
#define cuGraphAddKernelNode cuGraphAddKernelNode_v2
#define cuGraphExecKernelNodeSetParams cuGraphExecKernelNodeSetParams_v2
#define cuGraphExecUpdate cuGraphExecUpdate_v2
#define cuGraphInstantiate cuGraphInstantiateWithFlags
#define cuGraphInstantiateWithParams __CUDA_API_PTSZ(cuGraphInstantiateWithParams)
#define cuGraphKernelNodeGetParams cuGraphKernelNodeGetParams_v2
#define cuGraphKernelNodeSetParams cuGraphKernelNodeSetParams_v2
#define cuGraphLaunch __CUDA_API_PTSZ(cuGraphLaunch)
#define cuGraphUpload __CUDA_API_PTSZ(cuGraphUpload)
#define cuGraphicsMapResources __CUDA_API_PTSZ(cuGraphicsMapResources)
#define cuGraphicsResourceGetMappedPointer cuGraphicsResourceGetMappedPointer_v2
#define cuGraphicsResourceSetMapFlags cuGraphicsResourceSetMapFlags_v2
#define cuGraphicsUnmapResources __CUDA_API_PTSZ(cuGraphicsUnmapResources)
#define cuIpcOpenMemHandle cuIpcOpenMemHandle_v2
#define cuLaunchCooperativeKernel __CUDA_API_PTSZ(cuLaunchCooperativeKernel)
#define cuLaunchHostFunc __CUDA_API_PTSZ(cuLaunchHostFunc)
#define cuLaunchKernel __CUDA_API_PTSZ(cuLaunchKernel)
#define cuLaunchKernelEx __CUDA_API_PTSZ(cuLaunchKernelEx)
#define cuLinkAddData cuLinkAddData_v2
#define cuLinkAddFile cuLinkAddFile_v2
#define cuLinkCreate cuLinkCreate_v2
#define cuMemAlloc cuMemAlloc_v2
#define cuMemAllocAsync __CUDA_API_PTSZ(cuMemAllocAsync)
#define cuMemAllocFromPoolAsync __CUDA_API_PTSZ(cuMemAllocFromPoolAsync)
#define cuMemAllocHost cuMemAllocHost_v2
#define cuMemAllocPitch cuMemAllocPitch_v2
#define cuMemFree cuMemFree_v2
#define cuMemFreeAsync __CUDA_API_PTSZ(cuMemFreeAsync)
#define cuMemGetAddressRange cuMemGetAddressRange_v2
#define cuMemGetInfo cuMemGetInfo_v2
#define cuMemHostGetDevicePointer cuMemHostGetDevicePointer_v2
#define cuMemHostRegister cuMemHostRegister_v2
#define cuMemMapArrayAsync __CUDA_API_PTSZ(cuMemMapArrayAsync)
#define cuMemPrefetchAsync __CUDA_API_PTSZ(cuMemPrefetchAsync)
#define cuMemPrefetchAsync_v2 __CUDA_API_PTSZ(cuMemPrefetchAsync_v2)
#define cuMemcpy __CUDA_API_PTDS(cuMemcpy)
#define cuMemcpy2D __CUDA_API_PTDS(cuMemcpy2D_v2)
#define cuMemcpy2DAsync __CUDA_API_PTSZ(cuMemcpy2DAsync_v2)
#define cuMemcpy2DUnaligned __CUDA_API_PTDS(cuMemcpy2DUnaligned_v2)
#define cuMemcpy3D __CUDA_API_PTDS(cuMemcpy3D_v2)
#define cuMemcpy3DAsync __CUDA_API_PTSZ(cuMemcpy3DAsync_v2)
#define cuMemcpy3DPeer __CUDA_API_PTDS(cuMemcpy3DPeer)
#define cuMemcpy3DPeerAsync __CUDA_API_PTSZ(cuMemcpy3DPeerAsync)
#define cuMemcpyAsync __CUDA_API_PTSZ(cuMemcpyAsync)
#define cuMemcpyAtoA __CUDA_API_PTDS(cuMemcpyAtoA_v2)
#define cuMemcpyAtoD __CUDA_API_PTDS(cuMemcpyAtoD_v2)
#define cuMemcpyAtoH __CUDA_API_PTDS(cuMemcpyAtoH_v2)
#define cuMemcpyAtoHAsync __CUDA_API_PTSZ(cuMemcpyAtoHAsync_v2)
#define cuMemcpyDtoA __CUDA_API_PTDS(cuMemcpyDtoA_v2)
#define cuMemcpyDtoD __CUDA_API_PTDS(cuMemcpyDtoD_v2)
#define cuMemcpyDtoDAsync __CUDA_API_PTSZ(cuMemcpyDtoDAsync_v2)
#define cuMemcpyDtoH __CUDA_API_PTDS(cuMemcpyDtoH_v2)
#define cuMemcpyDtoHAsync __CUDA_API_PTSZ(cuMemcpyDtoHAsync_v2)
#define cuMemcpyHtoA __CUDA_API_PTDS(cuMemcpyHtoA_v2)
#define cuMemcpyHtoAAsync __CUDA_API_PTSZ(cuMemcpyHtoAAsync_v2)
#define cuMemcpyHtoD __CUDA_API_PTDS(cuMemcpyHtoD_v2)
#define cuMemcpyHtoDAsync __CUDA_API_PTSZ(cuMemcpyHtoDAsync_v2)
#define cuMemcpyPeer __CUDA_API_PTDS(cuMemcpyPeer)
#define cuMemcpyPeerAsync __CUDA_API_PTSZ(cuMemcpyPeerAsync)
#define cuMemsetD16 __CUDA_API_PTDS(cuMemsetD16_v2)
#define cuMemsetD16Async __CUDA_API_PTSZ(cuMemsetD16Async)
#define cuMemsetD2D16 __CUDA_API_PTDS(cuMemsetD2D16_v2)
#define cuMemsetD2D16Async __CUDA_API_PTSZ(cuMemsetD2D16Async)
#define cuMemsetD2D32 __CUDA_API_PTDS(cuMemsetD2D32_v2)
#define cuMemsetD2D32Async __CUDA_API_PTSZ(cuMemsetD2D32Async)
#define cuMemsetD2D8 __CUDA_API_PTDS(cuMemsetD2D8_v2)
#define cuMemsetD2D8Async __CUDA_API_PTSZ(cuMemsetD2D8Async)
#define cuMemsetD32 __CUDA_API_PTDS(cuMemsetD32_v2)
#define cuMemsetD32Async __CUDA_API_PTSZ(cuMemsetD32Async)
#define cuMemsetD8 __CUDA_API_PTDS(cuMemsetD8_v2)
#define cuMemsetD8Async __CUDA_API_PTSZ(cuMemsetD8Async)
#define cuModuleGetGlobal cuModuleGetGlobal_v2
#define cuSignalExternalSemaphoresAsync __CUDA_API_PTSZ(cuSignalExternalSemaphoresAsync)
#define cuStreamAddCallback __CUDA_API_PTSZ(cuStreamAddCallback)
#define cuStreamAttachMemAsync __CUDA_API_PTSZ(cuStreamAttachMemAsync)
#define cuStreamBatchMemOp __CUDA_API_PTSZ(cuStreamBatchMemOp_v2)
#define cuStreamBatchMemOp_v2 __CUDA_API_PTSZ(cuStreamBatchMemOp_v2)
#define cuStreamBeginCapture __CUDA_API_PTSZ(cuStreamBeginCapture_v2)
#define cuStreamBeginCaptureToGraph __CUDA_API_PTSZ(cuStreamBeginCaptureToGraph)
#define cuStreamCopyAttributes __CUDA_API_PTSZ(cuStreamCopyAttributes)
#define cuStreamDestroy cuStreamDestroy_v2
#define cuStreamEndCapture __CUDA_API_PTSZ(cuStreamEndCapture)
#define cuStreamGetAttribute __CUDA_API_PTSZ(cuStreamGetAttribute)
#define cuStreamGetCaptureInfo __CUDA_API_PTSZ(cuStreamGetCaptureInfo_v2)
#define cuStreamGetCaptureInfo_v2 __CUDA_API_PTSZ(cuStreamGetCaptureInfo_v2)
#define cuStreamGetCaptureInfo_v3 __CUDA_API_PTSZ(cuStreamGetCaptureInfo_v3)
#define cuStreamGetCtx __CUDA_API_PTSZ(cuStreamGetCtx)
#define cuStreamGetCtx_v2 __CUDA_API_PTSZ(cuStreamGetCtx_v2)
#define cuStreamGetFlags __CUDA_API_PTSZ(cuStreamGetFlags)
#define cuStreamGetId __CUDA_API_PTSZ(cuStreamGetId)
#define cuStreamGetPriority __CUDA_API_PTSZ(cuStreamGetPriority)
#define cuStreamIsCapturing __CUDA_API_PTSZ(cuStreamIsCapturing)
#define cuStreamQuery __CUDA_API_PTSZ(cuStreamQuery)
#define cuStreamSetAttribute __CUDA_API_PTSZ(cuStreamSetAttribute)
#define cuStreamSynchronize __CUDA_API_PTSZ(cuStreamSynchronize)
#define cuStreamUpdateCaptureDependencies __CUDA_API_PTSZ(cuStreamUpdateCaptureDependencies)
#define cuStreamUpdateCaptureDependencies_v2 __CUDA_API_PTSZ(cuStreamUpdateCaptureDependencies_v2)
#define cuStreamWaitEvent __CUDA_API_PTSZ(cuStreamWaitEvent)
#define cuStreamWaitValue32 __CUDA_API_PTSZ(cuStreamWaitValue32_v2)
#define cuStreamWaitValue32_v2 __CUDA_API_PTSZ(cuStreamWaitValue32_v2)
#define cuStreamWaitValue64 __CUDA_API_PTSZ(cuStreamWaitValue64_v2)
#define cuStreamWaitValue64_v2 __CUDA_API_PTSZ(cuStreamWaitValue64_v2)
#define cuStreamWriteValue32 __CUDA_API_PTSZ(cuStreamWriteValue32_v2)
#define cuStreamWriteValue32_v2 __CUDA_API_PTSZ(cuStreamWriteValue32_v2)
#define cuStreamWriteValue64 __CUDA_API_PTSZ(cuStreamWriteValue64_v2)
#define cuStreamWriteValue64_v2 __CUDA_API_PTSZ(cuStreamWriteValue64_v2)
#define cuTexRefGetAddress cuTexRefGetAddress_v2
#define cuTexRefSetAddress cuTexRefSetAddress_v2
#define cuTexRefSetAddress2D cuTexRefSetAddress2D_v3
#define cuWaitExternalSemaphoresAsync __CUDA_API_PTSZ(cuWaitExternalSemaphoresAsync)
#endif /* !__CUDA_API_VERSION_INTERNAL */

#ifdef __cplusplus
}
#endif
#endif /* GPUSLICE_CUDA_H */
