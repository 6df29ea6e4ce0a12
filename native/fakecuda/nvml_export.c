/*
 * nvmlInternalGetExportTable: the private table of entry points nvidia-smi
 * asks NVML for first thing ("Mismatch in versions between nvidia-smi and
 * NVML" when it is missing).
 *
 * The table is an array of words: word 0 holds the table's size in bytes,
 * every other word a function. Which word nvidia-smi 535.261.03 calls for
 * what was found by giving every word its own function and recording which
 * ones each view calls (FAKECUDA_NVML_TRACE=1 prints every call with its
 * arguments); NVIDIA's own mock NVML (github.com/NVIDIA/k8s-test-infra)
 * documents the same method and the same slots for nvidia-smi 580:
 *
 *   81        (unsigned index, nvmlDevice_t *out, 0x22): the handle of a device
 *   213       (nvmlDevice_t, unsigned *count, entry *array, ...): the compute
 *             processes of a device; *count is the array's capacity on entry
 *             (500) and the number of entries on return
 *   214, 215  the same for graphics and MPS processes: none here
 *   26        a log call (printf-like, nvidia-smi's own format strings)
 *
 * An entry of the process array is 4128 bytes: pid (u32) at 0, used memory
 * in bytes (u64) at 8, GPU and compute instance ids (u32, 0xFFFFFFFF when
 * not MIG) at 16 and 20, protected memory (u64) at 24, the NUL-terminated
 * process name at 32 (4096 bytes). nvidia-smi takes its "Processes" rows
 * (default view, -q, --query-compute-apps) from slot 213 alone, never from
 * nvmlDeviceGetComputeRunningProcesses.
 *
 * Every other slot answers NVML_ERROR_NOT_SUPPORTED, which nvidia-smi shows
 * as N/A.
 */
#include "nvml.h"

#include "fc_internal.h"
#include "nvml_fc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 256
#define SLOT_LOG 26
#define SLOT_HANDLE_BY_INDEX 81
#define SLOT_COMPUTE_PROCS 213
#define SLOT_GRAPHICS_PROCS 214
#define SLOT_MPS_PROCS 215

#define PROC_ENTRY_SIZE 4128
#define PROC_NAME_OFF 32
#define PROC_NAME_MAX 4096

static int trace;

static void put_entry(void *arr, unsigned i, uint32_t pid, uint64_t used)
{
	unsigned char *e = (unsigned char *)arr + (size_t)i * PROC_ENTRY_SIZE;
	memset(e, 0, PROC_NAME_OFF + 1);
	memcpy(e, &pid, sizeof(pid));
	memcpy(e + 8, &used, sizeof(used));
	uint32_t none = 0xFFFFFFFFu;
	memcpy(e + 16, &none, sizeof(none));
	memcpy(e + 20, &none, sizeof(none));
	fc_nvml_proc_name(pid, (char *)e + PROC_NAME_OFF, PROC_NAME_MAX);
}

static nvmlReturn_t compute_procs(nvmlDevice_t device, unsigned *count, void *arr)
{
	if (count == NULL || (*count > 0 && arr == NULL))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (fc_nvml_dev(device) == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned cap = *count;
	unsigned n = fc_nvml_procs(fc_nvml_index(device), cap, put_entry, arr);
	*count = n < cap ? n : cap;
	return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

static nvmlReturn_t slot_call(unsigned slot, void *a0, void *a1, void *a2, void *a3, void *a4, void *a5)
{
	if (trace)
		fprintf(stderr, "fakecuda nvml: internal slot %u (%p, %p, %p, %p, %p, %p)\n", slot, a0, a1, a2, a3, a4,
			a5);
	switch (slot) {
	case SLOT_LOG:
		return NVML_SUCCESS;
	case SLOT_HANDLE_BY_INDEX:
		return nvmlDeviceGetHandleByIndex_v2((unsigned)(uintptr_t)a0, a1);
	case SLOT_COMPUTE_PROCS:
		return compute_procs(a0, a1, a2);
	case SLOT_GRAPHICS_PROCS:
	case SLOT_MPS_PROCS:
		if (fc_nvml_dev(a0) == NULL || a1 == NULL)
			return NVML_ERROR_INVALID_ARGUMENT;
		*(unsigned *)a1 = 0;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_SUPPORTED;
}

/* One function per slot, so each call says which slot it came through. */
#define SLOT_FN(n)                                                                               \
	static nvmlReturn_t slot_##n(void *a0, void *a1, void *a2, void *a3, void *a4, void *a5) \
	{                                                                                        \
		return slot_call(n, a0, a1, a2, a3, a4, a5);                                     \
	}
#define SLOT_ADDR(n) (uintptr_t)slot_##n,
#define SLOT_ROW(M, h)                                                                                      \
	M(h##0) M(h##1) M(h##2) M(h##3) M(h##4) M(h##5) M(h##6) M(h##7) M(h##8) M(h##9) M(h##a) M(h##b) \
	M(h##c) M(h##d) M(h##e) M(h##f)
#define SLOT_ALL(M)                                                                          \
	SLOT_ROW(M, 0x0) SLOT_ROW(M, 0x1) SLOT_ROW(M, 0x2) SLOT_ROW(M, 0x3) SLOT_ROW(M, 0x4) \
	SLOT_ROW(M, 0x5) SLOT_ROW(M, 0x6) SLOT_ROW(M, 0x7) SLOT_ROW(M, 0x8) SLOT_ROW(M, 0x9) \
	SLOT_ROW(M, 0xa) SLOT_ROW(M, 0xb) SLOT_ROW(M, 0xc) SLOT_ROW(M, 0xd) SLOT_ROW(M, 0xe) \
	SLOT_ROW(M, 0xf)

SLOT_ALL(SLOT_FN)

/* Word 0 (slot_0x00 in the initialiser) is replaced by the size below. */
static uintptr_t table[SLOTS] = { SLOT_ALL(SLOT_ADDR) };

/* The id nvidia-smi 535 asks for, bytes in memory order. */
static const unsigned char smi_table_id[16] = { 0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
						0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4 };

FC_API nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const void *pExportTableId)
{
	if (ppExportTable == NULL || pExportTableId == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const char *t = getenv("FAKECUDA_NVML_TRACE");
	trace = t != NULL && *t != '\0' && strcmp(t, "0") != 0;
	if (memcmp(pExportTableId, smi_table_id, sizeof(smi_table_id)) != 0) {
		*ppExportTable = NULL;
		return NVML_ERROR_NOT_SUPPORTED;
	}
	table[0] = sizeof(table);
	*ppExportTable = table;
	return NVML_SUCCESS;
}
