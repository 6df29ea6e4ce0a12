/*
 * Imported memory: cuIpcOpenMemHandle, cuMemPoolImportPointer,
 * cuMemImportFromShareableHandle. The exporter pays: the memory was
 * charged to the process that allocated it (and the driver's per-process
 * figure, which the audit reads, attributes it there), so an import is
 * never charged to the importer, and releasing an import (cuIpcCloseMemHandle,
 * cuMemFreeAsync of an imported pointer, cuMemRelease of an imported
 * handle) gives nothing back: none of them is in this process's tables.
 *
 * One case needs care: a process importing a handle it exported itself
 * may get its own handle back (the driver then counts one more reference
 * on it). The charged handle takes that reference too, so the bytes stay
 * charged until the last cuMemRelease, once.
 *
 * Memory kept alive only by an importer after its exporter released its
 * handle is no longer charged on this fast path; the audit still sees it.
 */
#include "gs.h"

#define GS_IMPORT_PTR(sym)                                                        \
	CUresult sym(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) \
	{                                                                         \
		gs_pfn_##sym real = GS_REAL(sym);                                 \
		if (GS_UNLIKELY(real == NULL))                                    \
			return CUDA_ERROR_NOT_INITIALIZED;                        \
		return real(pdptr, handle, Flags); /* not charged: the exporter pays */ \
	}

GS_IMPORT_PTR(cuIpcOpenMemHandle)
GS_IMPORT_PTR(cuIpcOpenMemHandle_v2)

CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
	gs_pfn_cuMemPoolImportPointer real = GS_REAL(cuMemPoolImportPointer);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	return real(ptr_out, pool, shareData); /* not charged: the exporter pays */
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
					CUmemAllocationHandleType shHandleType)
{
	gs_pfn_cuMemImportFromShareableHandle real = GS_REAL(cuMemImportFromShareableHandle);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(handle, osHandle, shHandleType);
	if (r == CUDA_SUCCESS && handle != NULL && gs_state() == GS_ST_ACTIVE)
		gs_vmm_import_ref(*handle);
	return r;
}
