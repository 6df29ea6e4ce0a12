/*
 * libgpuslice.so internals: state, real entry points, ledger access.
 * docs/interceptor.md describes the design.
 */
#ifndef GPUSLICE_GS_H
#define GPUSLICE_GS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* declare the entry points under their exported names (no renames) */
#define __CUDA_API_VERSION_INTERNAL 1
#define __NVML_API_VERSION_INTERNAL 1
#include "cuda.h"
#include "cuda_ext.h"
#include "nvml.h"
#include "gpuslice_ledger.h"

/* CLOCK_MONOTONIC in ns: attach retries, the SHORT and settle gaps, the
 * compute page's heartbeat. */
static inline int64_t gs_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Whether `now` is at least `gap` ns after *last (0: never), taking the
 * turn (*last = now) if so: of threads asking at once, one gets it. The
 * rate limits of the SHORT message and of settling. */
static inline int gs_take_turn(int64_t *last, int64_t now, int64_t gap)
{
	int64_t prev = __atomic_load_n(last, __ATOMIC_RELAXED);
	return (prev == 0 || now - prev >= gap) &&
	       __atomic_compare_exchange_n(last, &prev, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* cuda.h maps base names to their current symbols with #define; the hooks
 * need the symbols themselves (and the pre-rename cuGetProcAddress). */
#undef cuGetProcAddress
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuMemAllocAsync
#undef cuMemAllocFromPoolAsync
#undef cuMemFreeAsync
#undef nvmlDeviceGetMemoryInfo
#undef nvmlDeviceGetUUID
#undef cuStreamGetCtx
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuCtxDestroy
#undef cuCtxCreate
#undef cuGraphInstantiate
#undef cuGraphLaunch
#undef cuGraphUpload
#undef cuGraphInstantiateWithParams
#undef cuIpcOpenMemHandle
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_INLINE static inline __attribute__((always_inline))
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
/* Defined in this library: addressed relative to the instruction pointer,
 * not through the GOT (the hot path's globals). */
#define GS_LOCAL __attribute__((visibility("hidden")))
/* 1 when x, a word other threads or processes write, is 0: on x86-64 one
 * compare with memory (the compiler keeps an atomic load apart from its
 * compare, and may not fold a plain one: the load races), elsewhere an
 * acquire load. For the hot path's flag and key checks, whose order with
 * the accesses around them is kept by compiler barriers (x86 keeps loads
 * in order with loads and stores with stores). */
#if defined(__x86_64__)
#define GS_IS_ZERO(x)                                                          \
	__extension__({                                                        \
		int gs_z_;                                                     \
		__asm__ volatile("cmp%z1 $0, %1" : "=@ccz"(gs_z_) : "m"(x)); \
		gs_z_;                                                         \
	})
#else
#define GS_IS_ZERO(x) (__atomic_load_n(&(x), __ATOMIC_ACQUIRE) == 0)
#endif
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- exported hooks: prototypes from the list ---- */
#define GS_HOOK(lib, base, sym, ver, ptds, ret, params) GS_EXPORT ret sym params;
#include "hooks.def"
#undef GS_HOOK

/* ---- real entry points ----
 * Every hooked symbol plus the few the hooks call themselves. */
#define GS_EXTRAS(X)                                                              \
	X(CU, cuCtxGetDevice, CUresult, (CUdevice * device))                          \
	X(CU, cuDeviceGetUuid, CUresult, (CUuuid * uuid, CUdevice dev))               \
	X(CU, cuDeviceGetUuid_v2, CUresult, (CUuuid * uuid, CUdevice dev))            \
	X(CU, cuCtxGetCurrent, CUresult, (CUcontext * pctx))                           \
	X(CU, cuCtxPushCurrent_v2, CUresult, (CUcontext ctx))                         \
	X(CU, cuCtxPopCurrent_v2, CUresult, (CUcontext * pctx))                       \
	X(CU, cuStreamGetCtx, CUresult, (CUstream hStream, CUcontext * pctx))         \
	X(CU, cuPointerGetAttribute, CUresult, (void *data, CUpointer_attribute attribute, CUdeviceptr ptr)) \
	X(CU, cuDevicePrimaryCtxGetState, CUresult, (CUdevice dev, unsigned int *flags, int *active)) \
	X(CU, cuCtxGetApiVersion, CUresult, (CUcontext ctx, unsigned int *version))   \
	X(CU, cuDeviceGetGraphMemAttribute, CUresult, (CUdevice device, CUgraphMem_attribute attr, void *value)) \
	X(CU, cuDeviceGetCount, CUresult, (int *count))                               \
	X(CU, cuMemPoolGetAttribute, CUresult, (CUmemoryPool pool, CUmemPool_attribute attr, void *value)) \
	X(NVML, nvmlDeviceGetUUID, nvmlReturn_t, (nvmlDevice_t device, char *uuid, unsigned int length)) \
	X(NVML, nvmlInit_v2, nvmlReturn_t, (void))                                      \
	X(NVML, nvmlDeviceGetHandleByUUID, nvmlReturn_t, (const char *uuid, nvmlDevice_t *device)) \
	X(NVML, nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                  \
	  (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos))

enum gs_lib { GS_LIB_CU, GS_LIB_NVML };

enum gs_real_index {
#define GS_HOOK(lib, base, sym, ver, ptds, ret, params) GS_R_##sym,
#include "hooks.def"
#undef GS_HOOK
#define GS_X(lib, sym, ret, params) GS_R_##sym,
	GS_EXTRAS(GS_X)
#undef GS_X
	GS_NREAL
};

#define GS_HOOK(lib, base, sym, ver, ptds, ret, params) typedef ret(*gs_pfn_##sym) params;
#include "hooks.def"
#undef GS_HOOK
#define GS_X(lib, sym, ret, params) typedef ret(*gs_pfn_##sym) params;
GS_EXTRAS(GS_X)
#undef GS_X

extern void *gs_real[GS_NREAL];
void *gs_real_resolve(int idx);
/* Copies of three of them for cuMemAlloc_v2 / cuMemFree_v2's common case
 * (hooks_ptr.c), each its own symbol so that a call through one is a
 * single instruction; set before gs_real[] is. */
extern gs_pfn_cuMemAlloc_v2 gs_hot_alloc GS_LOCAL;
extern gs_pfn_cuMemFree_v2 gs_hot_free GS_LOCAL;
extern gs_pfn_cuCtxGetDevice gs_hot_getdev GS_LOCAL;

static inline void *gs_real_get(int idx)
{
	void *p = __atomic_load_n(&gs_real[idx], __ATOMIC_ACQUIRE);
	if (GS_UNLIKELY(p == NULL))
		p = gs_real_resolve(idx);
	return p;
}

/* GS_REAL(sym): the real entry point, typed; NULL when it cannot be found. */
#define GS_REAL(sym) ((gs_pfn_##sym)gs_real_get(GS_R_##sym))

/* ---- hook table (dispatch.c) ---- */
struct gs_hook {
	const char *base;
	const char *symbol;
	int version;
	int ptds;
	int lib;
	int ridx;
	void *hook;
};
extern const struct gs_hook gs_hooks[];
extern const size_t gs_nhooks;
const struct gs_hook *gs_find_symbol(const char *name);

/* ---- process state (attach.c) ---- */
enum gs_state_v {
	GS_ST_UNINIT = 0, /* first hooked call not seen yet */
	GS_ST_INERT = 1,  /* no GPUSLICE_SESSION: pass everything through */
	GS_ST_ACTIVE = 2, /* attached: charge and virtualise */
	GS_ST_FAILED = 3, /* session set, attach failed: charged allocations fail */
};

#define GS_MAX_ORDINALS 64
#define GS_MAP_UNKNOWN (-2)
#define GS_MAP_NONE (-1)

/* Written only while attaching (never concurrently with the hot path's
 * readers of an ACTIVE state: they start after the release store of
 * state); read-mostly afterwards. */
struct gs_global {
	_Atomic int state;
	const struct gs_limits *lim;   /* PROT_READ */
	struct gs_counters_hdr *ctr;   /* PROT_READ|PROT_WRITE */
	struct gs_slot *slot;          /* this process's slot in ctr */
	uint32_t ngpus;
	uint32_t slot_index;
	uint64_t epoch;                /* bumped at every attach; 0 before the first */
	int credit_ok;                 /* membarrier registered: threads may keep credit */
	size_t ctr_len;
	signed char devmap[GS_MAX_ORDINALS]; /* ordinal -> ledger GPU, GS_MAP_* */
	char session[GS_SESSION_LEN];
} __attribute__((aligned(64)));

extern struct gs_global gs GS_LOCAL;

/* Per thread: the stripe of the slot this thread owns, NULL when it owns
 * none (valid while epoch == gs.epoch; credit.h). Initial-exec TLS: the
 * library is preloaded, so the access is one %fs-relative load. */
#define GS_TLS_MODEL __attribute__((tls_model("initial-exec")))
struct gs_tls {
	struct gs_slot_stripe *st;
	uint64_t epoch;
	struct gs_front *fr;        /* the pointer table's front this thread owns (front.h), or NULL */
	unsigned char fr_tried;     /* a front was looked for */
	/* cuMemAlloc_v2 / cuMemFree_v2's common case (hooks_ptr.c): st when
	 * this thread owns both a stripe and a front, else NULL (gs_tls_hot) */
	struct gs_slot_stripe *hot;
	uint64_t dev_last;          /* device ordinal of the last common-case allocation, zero-extended;
	                             * GS_DEV_NONE (no 32-bit ordinal) before the first */
	long dev_gpu;               /* its ledger GPU (devmap entries never change within an attach) */
	uint64_t cap[GS_MAX_GPUS];  /* credit st keeps per ledger GPU: limit / 8 when last looked,
	                             * 0 until the slot is marked in the credit map (credit.c) */
};
extern __thread struct gs_tls gs_tls GS_TLS_MODEL;

#define GS_DEV_NONE (1ull << 32)

/* After st or fr changed: whether the common case may run. */
static inline void gs_tls_hot(void)
{
	gs_tls.hot = gs_tls.st != NULL && gs_tls.fr != NULL ? gs_tls.st : NULL;
}

int gs_init_slow(void);
int gs_failed_retry(void);
/* The driver refused an allocation the quota allowed on ledger GPU g:
 * tell gpusliced (rate-limited; attach.c). */
void gs_short(int g) __attribute__((cold));
int gs_short_send(int g) __attribute__((cold));
/* Before a reservation of n bytes on ledger GPU g that brings used near
 * the limit: wait (bounded) for an audit pass to charge the driver's
 * memory (settle.c). */
void gs_settle(int g, uint64_t n);
int gs_session_configured(void);

/* One acquire load; the slow path runs once per process (and after fork). */
static inline int gs_state(void)
{
	int s = atomic_load_explicit(&gs.state, memory_order_acquire);
	if (GS_UNLIKELY(s == GS_ST_UNINIT))
		s = gs_init_slow();
	return s;
}

/* ---- ledger (ledger.c) ---- */
int gs_dev_lookup_slow(int dev);
int gs_uuid_to_gpu(const char *uuid);

static inline int gs_dev_to_gpu(int dev)
{
	if (GS_LIKELY((unsigned)dev < GS_MAX_ORDINALS)) {
		int v = __atomic_load_n(&gs.devmap[dev], __ATOMIC_RELAXED);
		if (GS_LIKELY(v != GS_MAP_UNKNOWN))
			return v;
	}
	return gs_dev_lookup_slow(dev);
}

/* *p -= n, floored at 0: the daemon may have re-based or reclaimed the
 * counter since the bytes were charged (docs/ledger.md), and a release
 * must never wrap it to ~2^64 (which would deny every later allocation).
 * The common case is one load and one CAS. */
GS_INLINE void gs_sub_floor(uint64_t *p, uint64_t n, int order)
{
	uint64_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(p, &v, v > n ? v - n : 0, 1, order, __ATOMIC_RELAXED))
		;
}

#include "credit.h"

/* ---- allocation tables (ptrtab.c) ---- */
/* device pointer -> (GPU, bytes): the lock-free table of the hot path */
enum gs_tab_kind { GS_TAB_PTR, GS_NTAB };
/* VMM: physical handle -> (GPU, bytes, references); mapped address ->
 * (handle, size). Arrays and mipmapped arrays: handle -> ((GPU, bytes),
 * context they were created in), kept apart because their values can
 * collide. Graphs and executable graphs -> (device and bytes of their
 * memory allocation nodes, flags): hooks_graph.c. */
enum gs_xtab_kind { GS_XTAB_HANDLE, GS_XTAB_MAP, GS_XTAB_ARRAY, GS_XTAB_MIPMAP, GS_XTAB_GRAPH, GS_XTAB_GEXEC, GS_NXTAB };
int gs_tab_init(void);
void gs_tab_drop(void);

#include "ptrtab.h"

/* ---- context cost (ctxcost.c); gs_ctx_mu held for all of these ---- */
struct gs_ctxcharge {
	int active;  /* bytes reserved */
	int measure; /* the cost is measured around this creation */
	int dev;
	int g;
	uint64_t bytes;
	uint64_t before; /* NVML usage before the creation */
};
/* Before creating a context on dev: 0 (go on), -1 (refuse: no room). */
int gs_ctxcost_begin(struct gs_ctxcharge *c, CUdevice dev);
/* After the driver answered r: 0, or -1 when the context must be undone
 * and refused (its measured cost does not fit). */
int gs_ctxcost_end(struct gs_ctxcharge *c, CUresult r);
int gs_ctxcost_room(void); /* 1 when a created context can be recorded */
int gs_ctxcost_record(const struct gs_ctxcharge *c, CUcontext ctx);
void gs_ctxcost_release(CUcontext ctx);
int gs_ctxcost_primary_charged(CUdevice dev);
void gs_ctxcost_primary_set(const struct gs_ctxcharge *c);
void gs_ctxcost_primary_release(CUdevice dev);
void gs_ctxcost_drop(void);
void gs_graph_drop(void); /* hooks_graph.c, after fork */
void gs_vmm_import_ref(uint64_t handle); /* hooks_vmm.c */

/* ---- what pools keep (poolkept.c) ---- */
/* Up to n of the bytes pools keep on ledger GPU g, taken for an allocation
 * from a pool: how many. */
uint64_t gs_kept_take(int g, uint64_t n);
/* n bytes of a pool's allocation freed into it: they stay charged. */
void gs_kept_put(int g, uint64_t n);
/* Give back what the pools of g no longer hold (trimming them first when
 * trim is set): how many bytes (0 at once when nothing is kept or g is
 * no GPU of the session). */
uint64_t gs_kept_refresh(int g, int trim);
void gs_kept_drop(void); /* after fork */

/* ---- logging (log.c) ---- */
extern int gs_debug_on;
/* GPUSLICE_PLAIN_PATH=1: no per-thread credit, no pointer-table fronts;
 * every charge is one CAS on the ledger and every pointer goes in the
 * shared table (what the machinery is measured against, docs/ledger.md). */
extern int gs_plain_path;
void gs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define gs_debug(...)                 \
	do {                          \
		if (gs_debug_on)      \
			gs_log(__VA_ARGS__); \
	} while (0)

#endif
