/*
 * fakecuda internals shared by the driver (libcuda.so.1) and NVML
 * (libnvidia-ml.so.1). Nothing here is exported.
 */
#ifndef FC_INTERNAL_H
#define FC_INTERNAL_H

#define __CUDA_API_VERSION_INTERNAL 1
#include "cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fc_limset;

#define FC_API __attribute__((visibility("default")))
#define FC_HIDDEN __attribute__((visibility("hidden")))
#define FC_LIKELY(x) __builtin_expect(!!(x), 1)
#define FC_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define FC_DRIVER_VERSION 12060
#define FC_MAX_DEVICES 16
#define FC_DEFAULT_CAPACITY (80ULL << 30)
#define FC_GRANULARITY (2ULL << 20) /* cuMemGetAllocationGranularity */
#define FC_PITCH_ALIGN 512
#define FC_NVIDIA_DRIVER "560.35.03" /* the Linux driver release that ships CUDA 12.6 */

/* ------------------------------------------------------------------ */
/* configuration (config.c)                                            */
/* ------------------------------------------------------------------ */
struct fc_config {
	unsigned ndev;
	uint64_t capacity[FC_MAX_DEVICES];
	char state[128]; /* FAKECUDA_STATE */
	bool memlimits;  /* FAKECUDA_MEMORY_LIMITS=1 */
};

/* Parses FAKECUDA_DEVICES / FAKECUDA_STATE. Returns 0, or -1 after writing
 * one explanatory line to stderr (once per process). */
int fc_config_load(struct fc_config *cfg);
/* Parses a FAKECUDA_DEVICES value; 0 or -1. */
int fc_parse_devices(const char *s, struct fc_config *cfg);
/* Formats "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for physical index i. */
void fc_uuid_for_index(unsigned i, uint8_t bytes[16], char out[48]);

/* ------------------------------------------------------------------ */
/* node-wide state in /dev/shm (state.c)                               */
/* ------------------------------------------------------------------ */
#define FC_SHM_MAGIC 0x46434b53u /* "SKCF" */
#define FC_SHM_VERSION 3u /* 2: slot_hwm, per-slot liveness lock; 3: memory limits */
#define FC_SHM_SLOTS 8192 /* processes the fake node lists (a session serves 4,096) */
#define FC_PID_CLAIMED 0xFFFFFFFFu

struct fc_shm_dev {
	char uuid[48];
	char name[96];
	char busid[32]; /* "00000000:XX:00.0" */
	uint8_t uuid_bytes[16];
	uint64_t capacity;
	_Atomic uint64_t used; /* bytes held by all processes */
	uint32_t pci_bus;
	_Atomic uint32_t nlimits; /* live memory-limit entries on this device (memlimit.c) */
	uint8_t pad[256 - 48 - 96 - 32 - 16 - 8 - 8 - 8];
};

struct fc_shm_slot {
	_Atomic uint32_t pid; /* 0 free, FC_PID_CLAIMED while being reclaimed */
	uint32_t pad0;
	_Atomic uint64_t starttime; /* /proc/<pid>/stat field 22: guards pid reuse */
	_Atomic uint64_t ctxmask;   /* bit i: the process has a context on physical device i */
	uint64_t pad1;
	_Atomic uint64_t used[FC_MAX_DEVICES];
	/* Held by the thread that took the slot (a robust, process-shared
	 * mutex): when that thread or its process dies, or the process execs,
	 * the kernel sets FUTEX_OWNER_DIED in its word, as the real kernel
	 * driver learns of a process's death when its device files close. */
	pthread_mutex_t alive;
	uint8_t pad[256 - 32 - 8 * FC_MAX_DEVICES - sizeof(pthread_mutex_t)];
};

#define FC_FEATURE_MEMLIMITS 1u /* FAKECUDA_MEMORY_LIMITS=1: NVML's memory-limit calls work */
#define FC_LIM_ENTRIES 256 /* (device, cgroup) limits a node holds */
#define FC_LIM_RECS 16     /* limits one process can be charged under */
#define FC_LIM_PATH 472

/* One hard/soft limit of one device for one cgroup v2 directory, which is
 * known by its inode number (the cgroup id), not by its path. */
struct fc_shm_limit {
	_Atomic uint32_t gen; /* odd: live; even: free; bumped at each making and clearing */
	uint32_t dev;
	uint64_t cgid;
	uint64_t soft;
	_Atomic uint64_t hard;
	_Atomic uint64_t used; /* bytes charged under it */
	char path[FC_LIM_PATH];
};

/* What one process has charged under one limit entry (so a dead process's
 * charges can be given back): entry index + 1 (0: free) and its gen. */
struct fc_shm_limrec {
	_Atomic uint32_t ent;
	_Atomic uint32_t gen;
	_Atomic uint64_t bytes;
};

struct fc_shm {
	uint32_t magic;
	uint32_t version;
	uint32_t ndev;
	uint32_t nslots;
	char config[512]; /* canonical device list it was created with */
	_Atomic uint32_t slot_hwm; /* every slot at or past this index is free */
	uint32_t features;         /* FC_FEATURE_*, fixed when the state is created */
	_Atomic uint32_t lim_gen;  /* bumped when a limit entry is made or cleared */
	uint32_t pad1;
	pthread_mutex_t lim_lock;  /* robust, process-shared: serialises Set/clear/reap */
	uint8_t pad[4096 - 16 - 512 - 16 - sizeof(pthread_mutex_t)];
	struct fc_shm_dev dev[FC_MAX_DEVICES];
	struct fc_shm_slot slot[FC_SHM_SLOTS];
	struct fc_shm_limit limit[FC_LIM_ENTRIES];
	struct fc_shm_limrec limrec[FC_SHM_SLOTS][FC_LIM_RECS];
};

extern struct fc_shm *fc_shm;           /* mapped state */
extern struct fc_shm_slot *fc_self_slot; /* this process's slot (never NULL after attach) */

/* The path of the node-wide state file plus suffix ("" for the state,
 * "@timeline"...): in FAKECUDA_STATE_DIR, default /dev/shm. Returns 0, or
 * -1 after one stderr line. */
int fc_state_path(char *path, size_t len, const struct fc_config *cfg, const char *suffix);
/* Maps (creating if needed) the state named by cfg. 0 or -1 (stderr line written). */
int fc_state_attach(const struct fc_config *cfg);
/* Takes a slot for this process (at attach; again in a forked child). */
void fc_state_register_self(void);
/* Reclaims the slots of dead processes; nonzero if it reclaimed anything. */
uint64_t fc_state_sweep(void);
/* The same, at most once per millisecond per process (for failing allocations). */
uint64_t fc_state_sweep_limited(void);
/* Gives back everything this process holds (clean exit). */
void fc_state_release_self(void);

/* In a child forked after cuInit, the slot is taken on first use. */
extern struct fc_shm_slot fc_fork_slot;
void fc_state_after_fork(void);
struct fc_shm_slot *fc_state_slot_slow(void);

static inline struct fc_shm_slot *fc_slot(void)
{
	struct fc_shm_slot *s = fc_self_slot;
	return FC_LIKELY(s != &fc_fork_slot) ? s : fc_state_slot_slow();
}

/* Reserve bytes on physical device phys for this process; false if it does not fit. */
static inline bool fc_charge(unsigned phys, uint64_t bytes)
{
	struct fc_shm_dev *d = &fc_shm->dev[phys];
	const uint64_t cap = d->capacity;
	bool swept = false;
	uint64_t cur = atomic_load_explicit(&d->used, memory_order_relaxed);
	for (;;) {
		if (FC_UNLIKELY(bytes > cap || cur > cap - bytes)) {
			if (swept || fc_state_sweep_limited() == 0)
				return false;
			swept = true;
			cur = atomic_load_explicit(&d->used, memory_order_relaxed);
			continue;
		}
		if (atomic_compare_exchange_weak_explicit(&d->used, &cur, cur + bytes, memory_order_acq_rel,
							  memory_order_relaxed))
			break;
	}
	atomic_fetch_add_explicit(&fc_slot()->used[phys], bytes, memory_order_relaxed);
	return true;
}

void fc_sub_saturating(_Atomic uint64_t *v, uint64_t n);

/* ------------------------------------------------------------------ */
/* device nodes: FAKECUDA_DEVICE_NODES (devnodes.c)                    */
/* ------------------------------------------------------------------ */
enum fc_node_state {
	FC_NODE_ABSENT = 0,    /* ENOENT (or no such GPU) */
	FC_NODE_OK,            /* opened, or ENXIO/ENODEV: allowed, no driver behind it */
	FC_NODE_DENIED_CGROUP, /* EPERM: a device cgroup refused the open */
	FC_NODE_DENIED_MODE,   /* EACCES: the file's mode refused it */
};
struct fc_devnodes {
	bool enabled; /* FAKECUDA_DEVICE_NODES is set */
	enum fc_node_state ctl, uvm, gpu[FC_MAX_DEVICES];
};
/* Opens the nodes once per process (after fc_state_attach) and returns
 * what it found; not enabled when FAKECUDA_DEVICE_NODES is unset. */
const struct fc_devnodes *fc_devnodes(void);
/* Whether physical GPU phys can be used: its node opened (always true
 * when FAKECUDA_DEVICE_NODES is unset). */
bool fc_devnode_gpu_usable(unsigned phys);

/* Device memory each context costs (FAKECUDA_CTX_BYTES, read when the state
 * is attached; default FC_DEFAULT_CTX_BYTES). It is charged like an
 * allocation: to the device's used memory (cuMemGetInfo, NVML) and to this
 * process's slot (the per-process usage NVML reports). */
#define FC_DEFAULT_CTX_BYTES (300ULL << 20)
extern uint64_t fc_ctx_bytes;
/* FAKECUDA_MODULE_BYTES (default 0): the device memory each loaded module
 * holds, as a real driver's modules and library handles hold memory no
 * allocation entry point shows (misc.c). Read when the state is attached. */
extern uint64_t fc_module_bytes;
/* 1 (default): cuMemAlloc and cuMemAllocPitch take what the driver's do on
 * the device (alloc_granule.h); 0 (FAKECUDA_ALLOC_GRANULE=0): the size
 * asked. Read when the state is attached. */
extern int fc_alloc_granule;
/* Charge one context on physical device phys: the bytes charged (0 when
 * contexts cost nothing), or UINT64_MAX when the device has no room. */
uint64_t fc_ctx_charge(unsigned phys, const struct fc_limset **tok);
void fc_ctx_uncharge(unsigned phys, uint64_t bytes, const struct fc_limset *tok);

extern _Atomic int fc_released; /* set once this process gave everything back at exit */

static inline void fc_uncharge(unsigned phys, uint64_t bytes)
{
	if (FC_UNLIKELY(atomic_load_explicit(&fc_released, memory_order_relaxed)))
		return;
	fc_sub_saturating(&fc_slot()->used[phys], bytes);
	fc_sub_saturating(&fc_shm->dev[phys].used, bytes);
}

/* ------------------------------------------------------------------ */
/* memory limits per cgroup (memlimit.c: table, cgroups; limcharge.c:   */
/* the allocator's side)                                                */
/* ------------------------------------------------------------------ */
#define FC_LIM_DEPTH 8 /* limits (own cgroup and ancestors) one charge can meet */

/* The limit entries a process's charges on one device go to (private,
 * immutable, never freed); remembered by what it charged, given to the uncharge. */
struct fc_limset {
	unsigned n;
	struct {
		uint32_t ent, gen;
		struct fc_shm_limrec *rec; /* NULL when the process has no record free */
	} e[FC_LIM_DEPTH];
};
typedef const struct fc_limset *fc_limtok;

static inline bool fc_limits_enabled(void)
{
	return (fc_shm->features & FC_FEATURE_MEMLIMITS) != 0;
}

/* Index and gen of the live entries on device phys whose cgroup is this
 * process's or an ancestor of it; returns how many (at most FC_LIM_DEPTH). */
unsigned fc_lim_applicable(unsigned phys, uint32_t ent[FC_LIM_DEPTH], uint32_t gen[FC_LIM_DEPTH]);
/* What a process of this cgroup sees of device phys: total capped to the
 * smallest hard limit that applies, free to the least headroom. */
void fc_lim_meminfo(unsigned phys, uint64_t *total, uint64_t *free_bytes);
/* Gives back what slot index si's process charged under limits (exit, death). */
void fc_lim_release_slot(unsigned si);
/* Clears the entries whose cgroup directory is gone (lim_lock held). */
void fc_lim_reap_locked(void);
int fc_lim_lock(void);
void fc_lim_unlock(void);
/* The inode of a cgroup v2 directory (its cgroup id); 0 if path is not one. */
uint64_t fc_cgroup_id(const char *path);

/* The slow path of fc_charge_lim (limcharge.c, driver only): NULL when
 * charged under no limit, FC_LIM_REFUSED when not charged, else the limits
 * charged. A token returned by value: a local whose address escaped would
 * cost the allocation path a stack-protector check. */
#define FC_LIM_REFUSED ((fc_limtok)(uintptr_t)1)
fc_limtok fc_charge_limited(unsigned phys, uint64_t bytes);
void fc_uncharge_limited(fc_limtok tok, uint64_t bytes);
void fc_lim_after_fork(void);

/* Reserve bytes on physical device phys, under every limit of this
 * process's cgroups; *tok says what to give back. Without a limit on the
 * device this costs one atomic load more than fc_charge. */
static inline bool fc_charge_lim(unsigned phys, uint64_t bytes, fc_limtok *tok)
{
	if (FC_LIKELY(atomic_load_explicit(&fc_shm->dev[phys].nlimits, memory_order_acquire) == 0)) {
		*tok = NULL;
		return fc_charge(phys, bytes);
	}
	fc_limtok t = fc_charge_limited(phys, bytes);
	*tok = t == FC_LIM_REFUSED ? NULL : t;
	return t != FC_LIM_REFUSED;
}

static inline void fc_uncharge_lim(unsigned phys, uint64_t bytes, fc_limtok tok)
{
	if (FC_UNLIKELY(tok != NULL) && !atomic_load_explicit(&fc_released, memory_order_relaxed))
		fc_uncharge_limited(tok, bytes);
	fc_uncharge(phys, bytes);
}

#endif /* FC_INTERNAL_H */
