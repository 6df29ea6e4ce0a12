/*
 * Driver-internal declarations (libcuda.so.1 only).
 */
#ifndef FC_DRV_H
#define FC_DRV_H

#include "fc_internal.h"
#include "cuda_ext.h"

#include <pthread.h>

/* handle magics */
#define FC_MAGIC_CTX 0x43545831u
#define FC_MAGIC_STREAM 0x53545231u
#define FC_MAGIC_EVENT 0x45564e31u
#define FC_MAGIC_MODULE 0x4d4f4431u
#define FC_MAGIC_FUNC 0x46554e31u
#define FC_MAGIC_POOL 0x504f4f31u
#define FC_MAGIC_ARRAY 0x41525231u
#define FC_MAGIC_MIP 0x4d495031u
#define FC_MAGIC_VMM 0x564d4d31u
#define FC_MAGIC_DEAD 0xdeadc0deu

/* ---- initialization and devices (init.c) ---- */
extern _Atomic int fc_ready;    /* cuInit succeeded */
extern unsigned fc_nvisible;    /* devices this process sees */
extern unsigned fc_visible[FC_MAX_DEVICES]; /* visible ordinal -> physical index */

/* At cuInit (visible.c): what the control and UVM nodes allow, and the
 * devices the process sees (fills fc_visible / fc_nvisible). */
CUresult fc_nodes_status(void);
void fc_compute_visible(void);

#define FC_CHECK_INIT()                                                                          \
	do {                                                                                     \
		if (FC_UNLIKELY(!atomic_load_explicit(&fc_ready, memory_order_acquire)))        \
			return CUDA_ERROR_NOT_INITIALIZED;                                       \
	} while (0)

static inline bool fc_valid_dev(CUdevice d)
{
	return d >= 0 && (unsigned)d < fc_nvisible;
}

/* ---- contexts (ctx.c) ---- */
struct CUctx_st {
	uint32_t magic;
	int ordinal;   /* visible ordinal (the CUdevice) */
	unsigned phys; /* physical index */
	unsigned flags;
	bool primary;
	unsigned long long id;
	size_t limits[16];
	CUfunc_cache cache;
	uint64_t cost;    /* device memory the context holds (fc_ctx_charge) */
	fc_limtok lim;    /* the limits its cost was charged under */
	unsigned usage;   /* cuCtxAttach / cuCtxDetach count of a created context */
};

/* Top of this thread's context stack. Initial-exec: one %fs-relative load
 * (a driver's current context is its hottest thread-local); a library
 * loaded by dlopen gets it from glibc's static TLS reserve. */
extern __thread CUcontext fc_tls_ctx __attribute__((tls_model("initial-exec")));

static inline CUcontext fc_current(void)
{
	return fc_tls_ctx;
}
static inline bool fc_ctx_valid(CUcontext c)
{
	return c != NULL && c->magic == FC_MAGIC_CTX;
}

/* The calling thread's current context in *c: CUDA_SUCCESS, or why there is none. */
static inline CUresult fc_require_ctx(CUcontext *c)
{
	FC_CHECK_INIT();
	*c = fc_tls_ctx;
	if (FC_UNLIKELY(!fc_ctx_valid(*c)))
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

/* Declares `CUcontext c`, the current context; when there is none, the
 * calling entry point returns fc_require_ctx's error. */
#define FC_REQUIRE_CTX(c)                                          \
	CUcontext c;                                               \
	do {                                                       \
		CUresult fc_rc_ = fc_require_ctx(&c);              \
		if (FC_UNLIKELY(fc_rc_ != CUDA_SUCCESS))           \
			return fc_rc_;                             \
	} while (0)
/* the context of a stream argument (NULL/legacy/per-thread: current); NULL if invalid */
CUcontext fc_stream_ctx(CUstream s, CUresult *err);
void fc_mark_ctx_on_device(unsigned phys);

/* ---- allocations (alloc.c) ---- */
enum fc_kind {
	FC_KIND_DEVICE = 1,
	FC_KIND_MANAGED,
	FC_KIND_ASYNC,
	FC_KIND_ARRAY,
	FC_KIND_HOST,
	FC_KIND_REGISTERED,
};

struct fc_alloc {
	uintptr_t ptr;
	size_t size;    /* bytes requested */
	size_t taken;   /* bytes charged to the device (device kinds): size, or what cuMemAlloc rounds it to */
	size_t maplen;  /* bytes mapped */
	struct fc_alloc *next;
	CUcontext ctx;
	CUmemoryPool pool;
	unsigned phys;
	unsigned kind;
	unsigned flags;
	unsigned long long id;
	fc_limtok lim; /* the limits it was charged under (fc_charge_lim) */
};

/* Allocate device memory of `size` bytes on physical device phys for ctx (charged). */
CUresult fc_dev_alloc(CUcontext ctx, unsigned phys, size_t size, unsigned kind, CUmemoryPool pool, uintptr_t *out);
/* Free device memory allocated by fc_dev_alloc; kind_mask limits the kinds accepted. */
CUresult fc_dev_free(uintptr_t ptr, unsigned kind_mask, struct fc_alloc *copy_out);
/* Host (not charged) memory */
CUresult fc_host_alloc(size_t size, unsigned flags, void **out);
CUresult fc_host_free(void *p);
/* Copies the record covering [p, p+1) into *out; 0 if found. */
int fc_lookup_range(uintptr_t p, struct fc_alloc *out);
int fc_lookup_exact(uintptr_t p, struct fc_alloc *out);
int fc_register_host(uintptr_t p, size_t size, unsigned flags);
int fc_unregister_host(uintptr_t p);
/* Frees what the driver frees with ctx (context destruction, primary release / reset). */
void fc_free_ctx_allocs(CUcontext ctx);
#define FC_KMASK(k) (1u << (k))
#define FC_KMASK_DEVICE (FC_KMASK(FC_KIND_DEVICE) | FC_KMASK(FC_KIND_MANAGED) | FC_KMASK(FC_KIND_ASYNC))

/* ---- pools (pool.c) ---- */
struct CUmemPoolHandle_st {
	uint32_t magic;
	int ordinal;
	unsigned phys;
	bool is_default;
	CUmemPoolProps props;
	uint64_t threshold;
	int reuse[4];
	/* what the pool holds on the GPU (charged to the device and the
	 * process): its allocations (used) and what was freed into it and
	 * kept; all under lock */
	pthread_mutex_t lock;
	uint64_t used, used_high;
	uint64_t reserved, reserved_high;
	fc_limtok lim;                    /* the limits its reserve was charged under */
	struct CUmemPoolHandle_st *next;  /* every pool of the process (pool.c) */
};
CUmemoryPool fc_device_current_pool(int ordinal);
/* An allocation of n bytes from pool: from what it keeps, growing its
 * reserve (charged) when that is short; 0 or CUDA_ERROR_OUT_OF_MEMORY. */
CUresult fc_pool_take(CUmemoryPool pool, uint64_t n);
/* n bytes freed into pool: kept until a synchronisation gives back what
 * is above its release threshold (a destroyed pool gives it back now). */
void fc_pool_give(CUmemoryPool pool, uint64_t n);
/* A synchronisation: every pool gives back its reserve above
 * max(used, release threshold). */
void fc_pools_sync(void);

/* ---- virtual memory (vmm.c) ---- */
int fc_vmm_range(uintptr_t p, uintptr_t *base, size_t *size);

/* ---- arrays (array.c) ---- */
struct CUarray_st {
	uint32_t magic;
	bool owned; /* false for levels of a mipmapped array */
	CUDA_ARRAY3D_DESCRIPTOR desc;
	size_t elem;     /* bytes per element (format size * channels) */
	size_t rowbytes; /* Width * elem */
	size_t bytes;
	uintptr_t base;
};
bool fc_array_valid(CUarray a);

/* ---- per-thread variants ---- */
/* Defines NAME_SUFFIX as a distinct exported function forwarding to NAME. */
#define FC_PT_WRAP(ret, name, suffix, params, args)                                        \
	FC_API ret name##suffix params;                                                    \
	FC_API ret name##suffix params                                                     \
	{                                                                                  \
		return name args;                                                          \
	}

#endif /* FC_DRV_H */
