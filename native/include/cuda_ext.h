/*
 * gpuslice: CUDA driver API declarations beyond cuda.h (CUDA 12.6 ABI),
 * for the parts fakecuda models and the interceptor hooks: context
 * creation with parameters (cuCtxCreate_v3 / _v4), cuCtxAttach /
 * cuCtxDetach, graph memory nodes, IPC and imported memory.
 *
 * Written for this project from the documented ABI (numeric values and
 * struct layouts of the CUDA 12.6 driver); prototypes under their exported
 * names.
 */
#ifndef GPUSLICE_CUDA_EXT_H
#define GPUSLICE_CUDA_EXT_H

#include "cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contexts ---- */
typedef enum CUexecAffinityType_enum {
	CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0,
	CU_EXEC_AFFINITY_TYPE_MAX
} CUexecAffinityType;

typedef struct CUexecAffinitySmCount_st {
	unsigned int val;
} CUexecAffinitySmCount;

typedef struct CUexecAffinityParam_st {
	CUexecAffinityType type;
	union {
		CUexecAffinitySmCount smCount;
	} param;
} CUexecAffinityParam;

typedef struct CUctxCigParam_st {
	int sharedDataType;
	void *sharedData;
} CUctxCigParam;

typedef struct CUctxCreateParams_st {
	CUexecAffinityParam *execAffinityParams;
	int numExecAffinityParams;
	CUctxCigParam *cigParams;
} CUctxCreateParams;

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
				CUdevice dev);
CUresult CUDAAPI cuCtxAttach(CUcontext *pctx, unsigned int flags);
CUresult CUDAAPI cuCtxDetach(CUcontext ctx);

/* ---- graph memory nodes ---- */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v1_st {
	CUmemPoolProps poolProps;
	const CUmemAccessDesc *accessDescs;
	size_t accessDescCount;
	size_t bytesize;
	CUdeviceptr dptr; /* out: the address, fixed for the graph's lifetime */
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef enum CUgraphMem_attribute_enum {
	CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
	CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
	CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
	CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3
} CUgraphMem_attribute;

#define CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 1
#define CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD 2

typedef enum CUgraphInstantiateResult_enum {
	CUDA_GRAPH_INSTANTIATE_SUCCESS = 0,
	CUDA_GRAPH_INSTANTIATE_ERROR = 1,
	CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE = 2,
	CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED = 3,
	CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED = 4
} CUgraphInstantiateResult;

typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
	cuuint64_t flags;
	CUstream hUploadStream;
	CUgraphNode hErrNode_out;
	CUgraphInstantiateResult result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph);
CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);
CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, CUdeviceptr dptr);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				       char *logBuffer, size_t bufferSize);
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
					      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
						   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device);
CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value);

/* ---- IPC and imported memory ---- */
#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

typedef struct CUmemPoolPtrExportData_st {
	unsigned char reserved[64];
} CUmemPoolPtrExportData;

#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr);
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType handleType, unsigned long long flags);
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
						CUmemAllocationHandleType shHandleType);
CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr);
CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData);

/* ---- launches ---- */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* extensible launches (CUDA 12.0) */
typedef enum CUlaunchAttributeID_enum {
	CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
	CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
	CU_LAUNCH_ATTRIBUTE_PRIORITY = 8,
} CUlaunchAttributeID;

typedef union CUlaunchAttributeValue_union {
	char pad[64];
	int cooperative;
	int priority;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
	CUlaunchAttributeID id;
	char pad[8 - sizeof(CUlaunchAttributeID)];
	CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);

#ifdef __CUDA_API_VERSION_INTERNAL /* pre-rename entry points: cuda.h maps the names otherwise */
CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				    char *logBuffer, size_t bufferSize);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
#endif

#ifdef __cplusplus
}
#endif

#endif
