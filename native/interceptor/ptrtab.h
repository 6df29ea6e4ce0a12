/*
 * Per-process allocation tables (ptrtab.c has the design notes): the fast
 * paths, inline so the hooks pay no call for them.
 */
#ifndef GPUSLICE_PTRTAB_H
#define GPUSLICE_PTRTAB_H

#include <pthread.h>
#include <stdint.h>

#define GS_PROBE 64
#define GS_KEY_EMPTY 0ull
#define GS_KEY_TOMB (~0ull)
#define GS_VAL_GPU_SHIFT 56
#define GS_VAL_POOL (1ull << 55) /* a pool's allocation: its free keeps the bytes (poolkept.c) */
#define GS_VAL_BYTES_MASK (GS_VAL_POOL - 1)
#define GS_OVF_ENTRIES 4096
#define GS_TAB_BITS 20 /* entries of each table: 2^GS_TAB_BITS (a constant: the hot path's hash) */
#define GS_TAB_MASK ((1ull << GS_TAB_BITS) - 1)

struct gs_ent {
	uint64_t key;
	uint64_t val; /* gpu << 56 | pool flag | bytes; never 0 for a live entry */
};

struct gs_tab {
	struct gs_ent *e;
	struct gs_ent *ovf;
	unsigned shift; /* 64 - log2(entries) */
	uint64_t mask;
	unsigned novf; /* live overflow entries, read without the lock */
	pthread_mutex_t mu;
};

extern struct gs_tab gs_tabs[];

int gs_tab_insert_slow(struct gs_tab *t, uint64_t key, uint64_t val);
uint64_t gs_tab_remove_slow(struct gs_tab *t, uint64_t key);

static inline uint64_t gs_tab_hash(uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ull) >> (64 - GS_TAB_BITS);
}

/* key is neither GS_KEY_EMPTY (0) nor GS_KEY_TOMB (~0): one compare */
static inline int gs_key_ok(uint64_t key) { return key + 1 > 1; }

static inline uint64_t gs_val_pack(int g, uint64_t bytes)
{
	if (bytes > GS_VAL_BYTES_MASK)
		bytes = GS_VAL_BYTES_MASK;
	return ((uint64_t)g << GS_VAL_GPU_SHIFT) | bytes;
}

static inline int gs_val_gpu(uint64_t v) { return (int)(v >> GS_VAL_GPU_SHIFT); }
static inline uint64_t gs_val_bytes(uint64_t v) { return v & GS_VAL_BYTES_MASK; }
static inline int gs_val_pool(uint64_t v) { return (v & GS_VAL_POOL) != 0; }

/* Remember key -> val (packed, never 0); 0 on success, -1 when no slot
 * was found. */
static inline int gs_tab_insert_val(int kind, uint64_t key, uint64_t val)
{
	struct gs_tab *t = &gs_tabs[kind];
	if (!gs_key_ok(key) || t->e == NULL)
		return -1;
	uint64_t h = gs_tab_hash(key);
	for (unsigned i = 0; i < GS_PROBE; i++) {
		struct gs_ent *e = &t->e[(h + i) & GS_TAB_MASK];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		while (k == GS_KEY_EMPTY || k == GS_KEY_TOMB) {
			if (__atomic_compare_exchange_n(&e->key, &k, key, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				__atomic_store_n(&e->val, val, __ATOMIC_RELEASE);
				return 0;
			}
			/* lost the race: k now holds the winner's key */
		}
	}
	return gs_tab_insert_slow(t, key, val);
}

/* Remember key -> (g, bytes) */
static inline int gs_tab_insert(int kind, uint64_t key, int g, uint64_t bytes)
{
	return gs_tab_insert_val(kind, key, gs_val_pack(g, bytes));
}

/* Take key out; returns its packed value, 0 when it is not there. */
static inline uint64_t gs_tab_remove(int kind, uint64_t key)
{
	struct gs_tab *t = &gs_tabs[kind];
	if (!gs_key_ok(key) || t->e == NULL)
		return 0;
	uint64_t h = gs_tab_hash(key);
	for (unsigned i = 0; i < GS_PROBE; i++) {
		struct gs_ent *e = &t->e[(h + i) & GS_TAB_MASK];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY)
			return 0;
		if (k != key)
			continue;
		uint64_t v = __atomic_load_n(&e->val, __ATOMIC_ACQUIRE);
		if (__atomic_compare_exchange_n(&e->key, &k, GS_KEY_TOMB, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return v;
		return 0; /* released concurrently by another thread */
	}
	if (__atomic_load_n(&t->novf, __ATOMIC_ACQUIRE) == 0)
		return 0;
	return gs_tab_remove_slow(t, key);
}

#include "front.h"

/* Device pointers (GS_TAB_PTR): record in this thread's front if there is
 * room, else in the shared table. 0, or -1 when neither has room. */
GS_INLINE int gs_ptr_insert(uint64_t key, int g, uint64_t bytes)
{
	if (GS_LIKELY(gs_key_ok(key)) && GS_LIKELY(gs_front_put(key, g, bytes)))
		return 0;
	return gs_tab_insert(GS_TAB_PTR, key, g, bytes);
}

/* Take a device pointer out: this thread's front, the shared table, the
 * other threads' fronts. Its packed value, 0 when this process did not
 * charge it. */
GS_INLINE uint64_t gs_ptr_remove(uint64_t key)
{
	if (GS_UNLIKELY(!gs_key_ok(key)))
		return 0;
	uint64_t v = gs_front_take(key);
	if (GS_LIKELY(v != 0))
		return v;
	v = gs_tab_remove(GS_TAB_PTR, key);
	if (v != 0)
		return v;
	return gs_front_take_others(key);
}

/*
 * Four-word tables (VMM handles and mappings, arrays): lock-free like the
 * above (claim by a CAS on the key, release by a CAS to tombstone), without
 * overflow array; a lookup probes at most GS_XPROBE slots. Not on the
 * cuMemAlloc/cuMemFree path.
 */
#define GS_XPROBE 256

struct gs_xent {
	uint64_t key;
	uint64_t a; /* handle, array: packed (GPU, bytes); mapping: the handle */
	uint64_t b; /* handle: references; mapping: size; array: its context */
	uint64_t pad;
};

struct gs_xtab {
	struct gs_xent *e;
	unsigned shift;
	uint64_t mask;
};

extern struct gs_xtab gs_xtabs[];

/* Serialises the mapping bookkeeping (cuMemMap / cuMemUnmap /
 * cuMemAddressFree) with the driver call it belongs to. */
extern pthread_mutex_t gs_map_mu;
extern uint64_t gs_nmapped; /* live entries of GS_XTAB_MAP; gs_map_mu held */

/* Serialises the context-teardown hooks (cuCtxDestroy, primary context
 * release / reset) with each other and with every change to the array
 * tables (which are only touched with it held). */
extern pthread_mutex_t gs_ctx_mu;

struct gs_xent *gs_xtab_insert(int kind, uint64_t key, uint64_t a, uint64_t b);
struct gs_xent *gs_xtab_find(int kind, uint64_t key);
int gs_xtab_take(struct gs_xent *e, uint64_t key);

/*
 * Memory pool -> where its memory lives. Writers (pool creation, lookup of
 * a device's pool, destruction) take a mutex; gs_pool_where is lock-free.
 */
#define GS_POOL_UNKNOWN (-1)
#define GS_POOL_HOST (-2)
int gs_pool_where(uint64_t pool);
/* 0, or -1 when the table is full (the caller refuses the pool) */
int gs_pool_set(uint64_t pool, int where);
void gs_pool_forget(uint64_t pool);
/* The pools recorded on device ordinal dev: up to max into out; how many. */
int gs_pool_list(int dev, uint64_t *out, int max);

#endif
