/*
 * fc_exporttable: the driver's private tables NVIDIA's runtime asks for, and
 * module globals, as fakecuda models them. One event=check line per
 * property; event=integrity carries the driver check's inputs and output for
 * the test to recompute.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"
#include "drvctx.h"
#include "fc_check.h"

CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);

static const unsigned char runtime_id[16] = { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
					      0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 };
static const unsigned char tls_id[16] = { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
					  0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc };
static const unsigned char hooks_id[16] = { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
					    0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 };
static const unsigned char storage_id[16] = { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
					      0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 };
static const unsigned char check_id[16] = { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
					    0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 };

static void *const *table(const unsigned char id[16])
{
	CUuuid u;
	const void *t = NULL;
	memcpy(u.bytes, id, 16);
	return cuGetExportTable(&t, &u) == CUDA_SUCCESS ? (void *const *)t : NULL;
}

static int table_slots(void *const *t, size_t n)
{
	return t != NULL && (uintptr_t)t[0] == n * sizeof(void *);
}

/* Whether NVML lists this process on physical device 0 (it holds a context there). */
static int listed_by_nvml(void)
{
	static void *nvml;
	if (nvml == NULL)
		nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	int (*init)(void) = nvml ? (int (*)(void))dlsym(nvml, "nvmlInit_v2") : NULL;
	int (*handle)(unsigned, void **) = nvml ? (int (*)(unsigned, void **))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2") : NULL;
	int (*procs)(void *, unsigned *, void *) =
		nvml ? (int (*)(void *, unsigned *, void *))dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses") : NULL;
	struct {
		unsigned pid;
		unsigned long long used;
	} info[64];
	unsigned n = 64;
	void *d = NULL;
	if (init == NULL || handle == NULL || procs == NULL || init() != 0 || handle(0, &d) != 0 || procs(d, &n, info) != 0)
		return -1;
	for (unsigned i = 0; i < n; i++)
		if (info[i].pid == (unsigned)getpid())
			return 1;
	return 0;
}

/* The runtime takes the primary context's handle before it retains it: a
 * handle it may make current, which the process does not hold until retained. */
static void primary_before_retain(CUdevice dev)
{
	void *const *rt = table(runtime_id);
	CUcontext peek = NULL, p = NULL;
	check("runtime_primary_ctx",
	      rt != NULL && ((CUresult(*)(CUcontext *, CUdevice))rt[2])(&peek, dev) == CUDA_SUCCESS && peek != NULL);
	check("primary_peek_not_held", listed_by_nvml() == 0);
	check("primary_set_current_before_retain", cuCtxSetCurrent(peek) == CUDA_SUCCESS);
	check("primary_retain_same", cuDevicePrimaryCtxRetain(&p, dev) == CUDA_SUCCESS && p == peek);
	check("primary_retained_held", listed_by_nvml() == 1);
	check("primary_release_first", cuDevicePrimaryCtxRelease(dev) == CUDA_SUCCESS);
	cuCtxSetCurrent(NULL);
}

/* ---- context-local storage ---- */
typedef void (*cls_dtor)(CUcontext, void *, void *);
typedef CUresult (*cls_insert_fn)(CUcontext, void *, void *, cls_dtor);
typedef CUresult (*cls_remove_fn)(CUcontext, void *);
typedef CUresult (*cls_get_fn)(void **, CUcontext, void *);

static int dtor_calls;
static CUcontext dtor_ctx;
static void *dtor_key, *dtor_value;

static void record_dtor(CUcontext c, void *key, void *value)
{
	dtor_calls++;
	dtor_ctx = c;
	dtor_key = key;
	dtor_value = value;
}

static void context_storage(CUdevice dev)
{
	void *const *t = table(storage_id);
	check("storage_table", t != NULL);
	if (t == NULL)
		return;
	cls_insert_fn insert = (cls_insert_fn)t[0];
	cls_remove_fn forget = (cls_remove_fn)t[1];
	cls_get_fn get = (cls_get_fn)t[2];
	static int k1, k2, v1, v2, v3;
	void *v = NULL;

	CUcontext c;
	if (cuCtxCreate(&c, 0, dev) != CUDA_SUCCESS) {
		check("storage_ctx_create", 0);
		return;
	}
	check("storage_get_missing", get(&v, c, &k1) == CUDA_ERROR_INVALID_VALUE);
	check("storage_insert", insert(c, &k1, &v1, record_dtor) == CUDA_SUCCESS);
	check("storage_get", get(&v, c, &k1) == CUDA_SUCCESS && v == &v1);
	check("storage_get_current", get(&v, NULL, &k1) == CUDA_SUCCESS && v == &v1);
	check("storage_replace", insert(c, &k1, &v3, record_dtor) == CUDA_SUCCESS &&
					 get(&v, c, &k1) == CUDA_SUCCESS && v == &v3);
	check("storage_insert_second", insert(c, &k2, &v2, record_dtor) == CUDA_SUCCESS);
	check("storage_remove", forget(c, &k2) == CUDA_SUCCESS && get(&v, c, &k2) == CUDA_ERROR_INVALID_VALUE);
	dtor_calls = 0;
	check("storage_destroy", cuCtxDestroy(c) == CUDA_SUCCESS);
	/* only the key still stored is destroyed, with its latest value */
	check("storage_dtor_on_destroy",
	      dtor_calls == 1 && dtor_ctx == c && dtor_key == &k1 && dtor_value == &v3);

	/* the primary context: its storage goes with a reset */
	CUcontext p = NULL;
	check("primary_retain", cuDevicePrimaryCtxRetain(&p, dev) == CUDA_SUCCESS && cuCtxSetCurrent(p) == CUDA_SUCCESS);
	check("primary_insert", insert(p, &k1, &v1, record_dtor) == CUDA_SUCCESS);
	dtor_calls = 0;
	check("primary_reset", cuDevicePrimaryCtxReset(dev) == CUDA_SUCCESS);
	check("storage_dtor_on_reset", dtor_calls == 1 && dtor_ctx == p && dtor_value == &v1);
	check("storage_empty_after_reset", get(&v, p, &k1) == CUDA_ERROR_INVALID_VALUE);
	check("primary_release", cuDevicePrimaryCtxRelease(dev) == CUDA_SUCCESS);
	cuCtxSetCurrent(NULL);
}

/* ---- the driver check ---- */
typedef CUresult (*check_fn)(uint32_t version, uint64_t seconds, uint64_t out[2]);

static void driver_check(CUdevice dev)
{
	void *const *t = table(check_id), *const *rt = table(runtime_id);
	check("check_table", table_slots(t, 3));
	if (t == NULL || rt == NULL)
		return;
	check_fn f = (check_fn)t[1];
	uint64_t out[2] = { 0, 0 };
	check("check_v0", f(11080, 1700000000, out) == CUDA_SUCCESS && out[0] == 0x3341181c03cb675cULL &&
				  out[1] == 0x8ed383aa1f4cd1e8ULL);
	check("check_v1", f(11081, 1700000000, out) == CUDA_SUCCESS && out[0] == 0x1841181c03cb675cULL &&
				  out[1] == 0x8ed383aa1f4cd1e8ULL);
	uint64_t seconds = (uint64_t)time(NULL);
	if (f(11082, seconds, out) != CUDA_SUCCESS) {
		check("check_v2", 0);
		return;
	}
	int drv = 0, dom = 0, bus = 0, pdev = 0, n = 0;
	CUuuid u;
	cuDriverGetVersion(&drv);
	cuDeviceGetCount(&n);
	cuDeviceGetUuid(&u, dev);
	cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
	cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
	cuDeviceGetAttribute(&pdev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
	char uuid[33];
	for (int i = 0; i < 16; i++)
		sprintf(uuid + 2 * i, "%02x", (unsigned char)u.bytes[i]);
	printf("event=integrity version=11082 seconds=%llu driver=%d pid=%u tid=%u runtime_table=%llu "
	       "check_table=%llu check_fn=%llu devices=%d uuid=%s domain=%d bus=%d device=%d out0=%llu out1=%llu\n",
	       (unsigned long long)seconds, drv, (unsigned)getpid(), (unsigned)(uintptr_t)pthread_self(),
	       (unsigned long long)(uintptr_t)rt, (unsigned long long)(uintptr_t)t,
	       (unsigned long long)(uintptr_t)t[1], n, uuid, dom, bus, pdev, (unsigned long long)out[0],
	       (unsigned long long)out[1]);
}

/* ---- module globals ---- */
/* A data object of this very program: its ELF image is the module. */
const int fc_probe_global[7] = { 3, 1, 4, 1, 5, 9, 2 };

static unsigned char *read_self(size_t *len)
{
	FILE *f = fopen("/proc/self/exe", "rb");
	if (f == NULL)
		return NULL;
	size_t cap = 1 << 20, n = 0;
	unsigned char *b = malloc(cap);
	while (b != NULL) {
		size_t r = fread(b + n, 1, cap - n, f);
		n += r;
		if (n < cap)
			break;
		unsigned char *nb = realloc(b, cap *= 2);
		if (nb == NULL)
			free(b);
		b = nb;
	}
	fclose(f);
	*len = n;
	return b;
}

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* Appends one fat binary entry holding payload (LZ4, literals only, when lz4). */
static size_t fatbin_entry(unsigned char *out, unsigned sm, const unsigned char *elf, size_t len, int lz4)
{
	unsigned char *payload = out + 64;
	size_t plen = len;
	if (lz4) {
		size_t p = 0, rest = len - 15;
		payload[p++] = 0xf0;
		for (; rest >= 255; rest -= 255)
			payload[p++] = 255;
		payload[p++] = (unsigned char)rest;
		memcpy(payload + p, elf, len);
		plen = p + len;
	} else {
		memcpy(payload, elf, len);
	}
	size_t padded = (plen + 7) & ~(size_t)7;
	memset(out, 0, 64);
	out[0] = 2;    /* kind: ELF */
	out[2] = 0x01; /* version 0x101 */
	out[3] = 0x01;
	put32(out + 4, 64);
	put32(out + 8, (uint32_t)padded);
	put32(out + 16, (uint32_t)plen);
	put32(out + 28, sm);
	put64(out + 40, 0x11 | (lz4 ? 0x2000 : 0));
	put64(out + 56, len);
	return 64 + padded;
}

static int global_is_ours(CUmodule m)
{
	CUdeviceptr p = 0, p2 = 0;
	size_t size = 0;
	return cuModuleGetGlobal(&p, &size, m, "fc_probe_global") == CUDA_SUCCESS && size == sizeof(fc_probe_global) &&
	       memcmp((void *)(uintptr_t)p, fc_probe_global, sizeof(fc_probe_global)) == 0 &&
	       cuModuleGetGlobal(&p2, NULL, m, "fc_probe_global") == CUDA_SUCCESS && p2 == p;
}

static void module_globals(CUdevice dev)
{
	size_t len = 0;
	unsigned char *elf = read_self(&len);
	unsigned char *fat = elf ? malloc(16 + 3 * (64 + len + len / 255 + 32)) : NULL;
	CUcontext c;
	if (fat == NULL || len < 64 || cuCtxCreate(&c, 0, dev) != CUDA_SUCCESS) {
		check("globals_setup", 0);
		free(elf);
		free(fat);
		return;
	}
	CUmodule m;
	CUdeviceptr p;
	size_t size;
	check("globals_elf", cuModuleLoadData(&m, elf) == CUDA_SUCCESS && global_is_ours(m));
	check("globals_missing", cuModuleGetGlobal(&p, &size, m, "no_such_global") == CUDA_ERROR_NOT_FOUND);
	check("globals_function_is_not_data", cuModuleGetGlobal(&p, &size, m, "main") == CUDA_ERROR_NOT_FOUND);
	cuModuleUnload(m);

	/* a fat binary: an sm_86 entry that is no ELF, and an LZ4-compressed
	 * sm_80 cubin, which is the one for fakecuda's compute capability 8.0 */
	static const unsigned char junk[64] = { 0 };
	size_t off = 16;
	off += fatbin_entry(fat + off, 86, junk, sizeof(junk), 0);
	off += fatbin_entry(fat + off, 80, elf, len, 1);
	put32(fat, 0xba55ed50);
	fat[4] = 1; /* version */
	fat[5] = 0;
	fat[6] = 16; /* header size */
	fat[7] = 0;
	put64(fat + 8, off - 16);
	check("globals_fatbin_lz4", cuModuleLoadFatBinary(&m, fat) == CUDA_SUCCESS && global_is_ours(m));
	cuModuleUnload(m);

	static const char ptx[] = ".version 7.8\n.target sm_80\n.global .align 4 .b8 fc_probe_global[28];\n";
	check("globals_ptx_none", cuModuleLoadData(&m, ptx) == CUDA_SUCCESS &&
					  cuModuleGetGlobal(&p, &size, m, "fc_probe_global") == CUDA_ERROR_NOT_FOUND);
	cuModuleUnload(m);
	cuCtxDestroy(c);
	free(elf);
	free(fat);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdevice dev;
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
		printf("event=error what=init\n");
		return 1;
	}
	const void *t = (const void *)1;
	CUuuid unknown;
	memset(unknown.bytes, 0x5a, sizeof(unknown.bytes));
	check("unknown_id", cuGetExportTable(&t, &unknown) == CUDA_ERROR_NOT_SUPPORTED && t == NULL);
	check("null_args", cuGetExportTable(NULL, &unknown) == CUDA_ERROR_INVALID_VALUE &&
				   cuGetExportTable(&t, NULL) == CUDA_ERROR_INVALID_VALUE);
	check("runtime_table", table_slots(table(runtime_id), 10));
	check("tls_table", table_slots(table(tls_id), 4));
	check("hooks_table", table_slots(table(hooks_id), 7));
	primary_before_retain(dev);
	void *const *hooks = table(hooks_id);
	if (hooks != NULL) {
		void *area = NULL;
		size_t n = 0;
		((void (*)(void **, size_t *))hooks[2])(&area, &n);
		check("hooks_area", area != NULL && n > 0);
	}
	context_storage(dev);
	driver_check(dev);
	module_globals(dev);
	return summary();
}
