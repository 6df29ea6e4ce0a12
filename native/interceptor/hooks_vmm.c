/*
 * Virtual memory management: cuMemCreate charges a physical handle,
 * cuMemMap / cuMemUnmap / cuMemAddressFree / cuMemRetainAllocationHandle /
 * cuMemRelease keep its reference count.
 */
#include "charge.h"

/* ---- virtual memory management ----
 *
 * The physical handle is what costs. Like the driver, the interceptor keeps
 * a reference count per handle it charged: 1 until cuMemRelease, plus one
 * per mapping (cuMemMap) and per cuMemRetainAllocationHandle. The bytes are
 * given back when it drops to 0, i.e. when the handle has been released and
 * is no longer mapped anywhere. Mappings are remembered by address (with
 * their handle and size) so cuMemUnmap / cuMemAddressFree can find the
 * handles of the range they take down.
 */

static unsigned char vmm_full_warned;

/* A VMM table is full: the handle or mapping is undone and refused. */
static void vmm_table_full(void)
{
	if (!__atomic_exchange_n(&vmm_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("VMM table full: new handles and mappings are refused until some are released");
}

/* One more reference on a charged handle; -1 when it has none left. */
static int handle_ref(struct gs_xent *e)
{
	uint64_t r = __atomic_load_n(&e->b, __ATOMIC_ACQUIRE);
	do {
		if (r == 0)
			return -1;
	} while (!__atomic_compare_exchange_n(&e->b, &r, r + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	return 0;
}

/* One reference less; the last one gives the bytes back. */
static void handle_unref(struct gs_xent *e, uint64_t handle)
{
	uint64_t r = __atomic_load_n(&e->b, __ATOMIC_ACQUIRE);
	do {
		if (r == 0)
			return;
	} while (!__atomic_compare_exchange_n(&e->b, &r, r - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	if (r != 1)
		return;
	uint64_t v = __atomic_load_n(&e->a, __ATOMIC_ACQUIRE);
	if (gs_xtab_take(e, handle))
		gs_unreserve(gs_val_gpu(v), gs_val_bytes(v));
}

/* A handle the driver handed out again by an import: if this process
 * charged it, the import holds one more reference (the driver's count went
 * up too), so the bytes stay charged until the last release. */
void gs_vmm_import_ref(uint64_t handle)
{
	struct gs_xent *e = gs_xtab_find(GS_XTAB_HANDLE, handle);
	if (e != NULL)
		handle_ref(e);
}

static void handle_unref_by_key(uint64_t handle)
{
	struct gs_xent *e = gs_xtab_find(GS_XTAB_HANDLE, handle);
	if (e != NULL)
		handle_unref(e, handle);
}

/* After a successful unmap of [lo, lo + size) (gs_map_mu held): forget the
 * mappings recorded in it and drop their handles' references. Mappings laid
 * end to end from lo are followed address by address; anything left of the
 * range after a gap is found by a scan of the table (only then, and only
 * while mappings are recorded). */
static void drop_mappings(uint64_t lo, uint64_t size)
{
	uint64_t hi = size > UINT64_MAX - lo ? UINT64_MAX : lo + size;
	uint64_t cur = lo;
	while (cur < hi && gs_nmapped > 0) {
		struct gs_xent *m = gs_xtab_find(GS_XTAB_MAP, cur);
		if (m == NULL)
			break;
		uint64_t h = __atomic_load_n(&m->a, __ATOMIC_ACQUIRE);
		uint64_t sz = __atomic_load_n(&m->b, __ATOMIC_ACQUIRE);
		if (!gs_xtab_take(m, cur))
			break;
		gs_nmapped--;
		handle_unref_by_key(h);
		cur = sz == 0 || sz > hi - cur ? hi : cur + sz;
	}
	if (cur >= hi || gs_nmapped == 0 || gs_xtabs[GS_XTAB_MAP].e == NULL)
		return;
	struct gs_xtab *t = &gs_xtabs[GS_XTAB_MAP];
	for (uint64_t i = 0; i <= t->mask && gs_nmapped > 0; i++) {
		struct gs_xent *m = &t->e[i];
		uint64_t k = __atomic_load_n(&m->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY || k == GS_KEY_TOMB || k < cur || k >= hi)
			continue;
		uint64_t h = __atomic_load_n(&m->a, __ATOMIC_ACQUIRE);
		if (!gs_xtab_take(m, k))
			continue;
		gs_nmapped--;
		handle_unref_by_key(h);
	}
}

/* After a successful cuMemMap at ptr (gs_map_mu held). A mapping still
 * recorded at ptr is gone (the driver just mapped there; it was taken down
 * without cuMemUnmap): forget it first. -1 when the table is full. */
static int map_record(uint64_t ptr, uint64_t handle, uint64_t size)
{
	struct gs_xent *old = gs_xtab_find(GS_XTAB_MAP, ptr);
	if (old != NULL) {
		uint64_t h = __atomic_load_n(&old->a, __ATOMIC_ACQUIRE);
		if (gs_xtab_take(old, ptr)) {
			gs_nmapped--;
			handle_unref_by_key(h);
		}
	}
	if (gs_xtab_insert(GS_XTAB_MAP, ptr, handle, size) == NULL)
		return -1;
	gs_nmapped++;
	return 0;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	gs_pfn_cuMemCreate real = GS_REAL(cuMemCreate);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	int st = gs_state();
	if (st == GS_ST_INERT || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	struct charge c;
	CUresult r = charge_dev(&c, st, prop->location.id, size);
	if (r != CUDA_SUCCESS)
		return r;
	r = real(handle, size, prop, flags);
	if (!c.active)
		return r;
	if (r != CUDA_SUCCESS) {
		driver_refused(c.g, c.n, r);
		return r;
	}
	if (GS_UNLIKELY(gs_xtab_insert(GS_XTAB_HANDLE, *handle, gs_val_pack(c.g, c.n), 1) == NULL)) {
		gs_pfn_cuMemRelease rel = GS_REAL(cuMemRelease);
		if (rel != NULL)
			rel(*handle);
		gs_unreserve(c.g, c.n);
		*handle = 0;
		vmm_table_full();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	gs_pfn_cuMemRelease real = GS_REAL(cuMemRelease);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	struct gs_xent *e = gs_state() == GS_ST_ACTIVE ? gs_xtab_find(GS_XTAB_HANDLE, handle) : NULL;
	CUresult r = real(handle);
	if (e != NULL && r == CUDA_SUCCESS)
		handle_unref(e, handle);
	return r;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	gs_pfn_cuMemRetainAllocationHandle real = GS_REAL(cuMemRetainAllocationHandle);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(handle, addr);
	if (r == CUDA_SUCCESS && gs_state() == GS_ST_ACTIVE) {
		struct gs_xent *e = gs_xtab_find(GS_XTAB_HANDLE, *handle);
		if (e != NULL)
			handle_ref(e);
	}
	return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	gs_pfn_cuMemMap real = GS_REAL(cuMemMap);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	struct gs_xent *e = gs_state() == GS_ST_ACTIVE ? gs_xtab_find(GS_XTAB_HANDLE, handle) : NULL;
	if (e == NULL)
		return real(ptr, size, offset, handle, flags);
	pthread_mutex_lock(&gs_map_mu);
	CUresult r;
	if (handle_ref(e) < 0) {
		r = real(ptr, size, offset, handle, flags); /* released meanwhile: the driver decides */
	} else {
		r = real(ptr, size, offset, handle, flags);
		if (r != CUDA_SUCCESS) {
			handle_unref(e, handle);
		} else if (map_record(ptr, handle, size) < 0) {
			/* unrecorded, its unmap could not be seen: undone */
			gs_pfn_cuMemUnmap unmap = GS_REAL(cuMemUnmap);
			if (unmap != NULL)
				unmap(ptr, size);
			handle_unref(e, handle);
			vmm_table_full();
			r = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	pthread_mutex_unlock(&gs_map_mu);
	return r;
}

#define GS_UNMAP_RANGE(sym)                                                  \
	CUresult sym(CUdeviceptr ptr, size_t size)                           \
	{                                                                    \
		gs_pfn_##sym real = GS_REAL(sym);                            \
		if (GS_UNLIKELY(real == NULL))                               \
			return CUDA_ERROR_NOT_INITIALIZED;                   \
		if (gs_state() != GS_ST_ACTIVE)                              \
			return real(ptr, size);                              \
		pthread_mutex_lock(&gs_map_mu);                              \
		CUresult r = real(ptr, size);                                \
		if (r == CUDA_SUCCESS)                                       \
			drop_mappings(ptr, size);                            \
		pthread_mutex_unlock(&gs_map_mu);                            \
		return r;                                                    \
	}

GS_UNMAP_RANGE(cuMemUnmap)
GS_UNMAP_RANGE(cuMemAddressFree) /* a driver that drops mappings left in the range */
