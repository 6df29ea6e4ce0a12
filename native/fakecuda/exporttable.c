/*
 * cuGetExportTable: the driver's private tables, which NVIDIA's CUDA runtime
 * asks for by 16-byte id before it answers any call. Only their layout is
 * public knowledge (the ZLUDA project documents the ids, slot counts and what
 * the slots it has seen used do); this file answers the ones the CUDA 11.8
 * runtime needs, with the behaviour that runtime relies on:
 *
 *   runtime interface   6bd5fb6c-5bf4-e74a-8987-d93912fd9df9, 10 slots
 *   tools TLS           42d85a81-23f6-cb47-8298-f6e78a3aecdc,  4 slots
 *   tools callbacks     a094798c-2e74-2e74-93f2-0800200c0a66,  7 slots
 *   context storage     c693336e-1121-df11-a8c3-68f355d89593,  3 slots
 *   driver check        d4082055-bde6-704b-8d34-ba123c66e1f2,  3 slots
 *
 * (cuBLASLt's GEMM path also asks for 21318c60-9714-3248-8ca6-41ff7324c8f2,
 * a context table of some 90 slots few of which are known; it is not served,
 * so cuBLAS answers CUBLAS_STATUS_NOT_SUPPORTED there: no kernel runs here.)
 *
 * Tables whose first slot is a size hold their length in bytes there. Slots
 * whose purpose is unknown hold a function that answers
 * CUDA_ERROR_NOT_SUPPORTED rather than a NULL a caller would jump to. Any
 * other id is CUDA_ERROR_NOT_SUPPORTED, as the driver answers an id it does
 * not know. The table contents never change, so they are plain constants.
 */
#include "drv.h"
#include "exporttable.h"
#include "integrity.h"

#include <string.h>

typedef void (*fc_slot_fn)(void);

/* One slot of a table: a function or, in slot 0 of most tables, a size. */
union fc_slot {
	fc_slot_fn fn;
	uintptr_t size;
};

#define SLOT(f) { .fn = (fc_slot_fn)(f) }
#define SIZE_SLOT(n) { .size = (n) * sizeof(union fc_slot) }

static CUresult unknown_slot(void)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}
#define UNKNOWN SLOT(unknown_slot)

/* ---- runtime interface ---- */

/* The runtime's fat binaries are loaded as modules: fakecuda's modules hold
 * no code, so any well-formed wrapper gives one, which knows the globals of
 * the fat binary's cubin (modimage.c). */
#define FATBINC_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u

struct fatbinc_wrapper {
	uint32_t magic;
	uint32_t version;
	const void *data;
	const void *filename_or_fatbins;
};

static CUresult load_fatbin_header(CUmodule *module, const void *header)
{
	if (module == NULL || header == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t magic;
	memcpy(&magic, header, sizeof(magic));
	if (magic != FATBIN_MAGIC)
		return CUDA_ERROR_INVALID_IMAGE;
	return cuModuleLoadFatBinary(module, header);
}

/* A wrapper of version 1 points at one fat binary; one of version 2 (code
 * linked from several objects) at a NULL-terminated array of them, of which
 * the first is read for globals. */
static CUresult load_fatbin_wrapper(CUmodule *module, const struct fatbinc_wrapper *w)
{
	if (module == NULL || w == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (w->magic != FATBINC_MAGIC || (w->version != 1 && w->version != 2))
		return CUDA_ERROR_INVALID_IMAGE;
	const void *header = w->data;
	if (w->version == 2 && w->filename_or_fatbins != NULL)
		header = *(const void *const *)w->filename_or_fatbins;
	return load_fatbin_header(module, header);
}

static CUresult rt_module_from_fatbinc(CUmodule *module, const struct fatbinc_wrapper *w)
{
	return load_fatbin_wrapper(module, w);
}

/* The primary context of a device, without retaining it. */
static CUresult rt_primary_ctx(CUcontext *pctx, CUdevice dev)
{
	return fc_primary_ctx_peek(pctx, dev);
}

static CUresult rt_module_from_fatbinc_ex(CUmodule *module, const struct fatbinc_wrapper *w, void *a3, void *a4,
					  unsigned a5)
{
	(void)a3;
	(void)a4;
	(void)a5;
	return load_fatbin_wrapper(module, w);
}

static CUresult rt_notify(uintptr_t arg)
{
	(void)arg;
	return CUDA_SUCCESS;
}

static CUresult rt_module_from_fatbin_ex(const void *header, CUmodule *module, void *a3, void *a4, unsigned a5)
{
	(void)a3;
	(void)a4;
	(void)a5;
	return load_fatbin_header(module, header);
}

static const union fc_slot runtime_interface[10] = {
	SIZE_SLOT(10),
	SLOT(rt_module_from_fatbinc),
	SLOT(rt_primary_ctx),
	UNKNOWN,
	UNKNOWN,
	UNKNOWN,
	SLOT(rt_module_from_fatbinc_ex),
	SLOT(rt_notify),
	SLOT(rt_module_from_fatbin_ex),
	UNKNOWN,
};

/* ---- tools: thread-local hooks and runtime callbacks ---- */
static const union fc_slot tools_tls[4] = {
	SIZE_SLOT(4),
	UNKNOWN,
	UNKNOWN,
	UNKNOWN,
};

/* Two areas the runtime registers its callback hooks in; no tool reads them here. */
static uintptr_t hooks_area[1024];
static unsigned char hooks_flags[16];

static void tools_hooks_area(void **ptr, size_t *size)
{
	if (ptr)
		*ptr = hooks_area;
	if (size)
		*size = sizeof(hooks_area) / sizeof(hooks_area[0]);
}

static void tools_hooks_flags(void **ptr, size_t *size)
{
	if (ptr)
		*ptr = hooks_flags;
	if (size)
		*size = sizeof(hooks_flags);
}

static const union fc_slot tools_callbacks[7] = {
	SIZE_SLOT(7), UNKNOWN, SLOT(tools_hooks_area), UNKNOWN, UNKNOWN, UNKNOWN, SLOT(tools_hooks_flags),
};

/* ---- context-local storage (no size slot) ---- */
static const union fc_slot context_storage[3] = {
	SLOT(fc_cls_insert),
	SLOT(fc_cls_remove),
	SLOT(fc_cls_get),
};

/* ---- the runtime's check of the driver (integrity.c) ---- */
static CUresult check_driver(uint32_t runtime_version, uint64_t seconds, uint64_t out[2]);

static const union fc_slot driver_check[3] = {
	SIZE_SLOT(3),
	SLOT(check_driver),
	UNKNOWN,
};

static CUresult check_driver(uint32_t runtime_version, uint64_t seconds, uint64_t out[2])
{
	FC_CHECK_INIT();
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct fc_integrity_input in;
	memset(&in, 0, sizeof(in));
	int v = 0;
	cuDriverGetVersion(&v);
	in.driver_version = (uint32_t)v;
	in.runtime_version = runtime_version;
	in.seconds = seconds;
	in.runtime_table = runtime_interface;
	in.check_table = driver_check;
	in.check_fn = (const void *)(uintptr_t)check_driver;
	in.ndev = fc_nvisible;
	for (unsigned d = 0; d < fc_nvisible; d++) {
		CUuuid u;
		int dom = 0, bus = 0, dev = 0;
		cuDeviceGetUuid_v2(&u, (CUdevice)d);
		cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, (CUdevice)d);
		cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, (CUdevice)d);
		cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, (CUdevice)d);
		memcpy(in.dev[d].uuid, u.bytes, 16);
		in.dev[d].pci_domain = dom;
		in.dev[d].pci_bus = bus;
		in.dev[d].pci_device = dev;
	}
	fc_integrity_value(&in, out);
	return CUDA_SUCCESS;
}

/* ---- the ids ---- */
struct table_id {
	unsigned char id[16];
	const union fc_slot *table;
};

static const struct table_id tables[] = {
	{ { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
	  runtime_interface },
	{ { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
	  tools_tls },
	{ { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
	  tools_callbacks },
	{ { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
	  context_storage },
	{ { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 },
	  driver_check },
};

FC_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	if (ppExportTable == NULL || pExportTableId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		if (memcmp(tables[i].id, pExportTableId->bytes, 16) == 0) {
			*ppExportTable = tables[i].table;
			return CUDA_SUCCESS;
		}
	*ppExportTable = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
