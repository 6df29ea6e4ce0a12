/*
 * The pointer table's per-thread front (docs/charging.md "Tables"): a
 * small direct-mapped array of (device pointer, charge) owned by one thread,
 * written by it with plain stores. An allocation is recorded in its
 * thread's front when its place there is free, else in the shared table; a
 * release looks in its own thread's front first, then in the shared table,
 * then (front.c) in the other threads' fronts, which are flushed into the
 * shared table for it.
 *
 * The owner writes `busy` around each take (and each change of `cool`)
 * and reads `revoke` between; a flusher sets `revoke`, runs membarrier
 * (which orders the owner's store before its load as a fence would, so the
 * owner pays none), then waits for `busy` to be 0 and has the front to
 * itself, as far as takes go, until it clears `revoke`. Filling an empty
 * entry needs no handshake (gs_front_store). Included from ptrtab.h.
 */
#ifndef GPUSLICE_FRONT_H
#define GPUSLICE_FRONT_H

#include <stdint.h>

#define GS_FRONTS 8       /* threads of a process with a front of their own */
#define GS_FRONT_BITS 5   /* entries of a front: 2^GS_FRONT_BITS */
#define GS_FRONT_COOL 4096 /* allocations that skip a front after it was flushed for another thread */

/* An entry: the pointer, its bytes and its ledger GPU apart, so that the
 * release reads them without unpacking (the shared table packs them);
 * 32 bytes, so that its place is a shift of the hash. */
struct gs_fent {
	uint64_t key;   /* GS_KEY_EMPTY when free */
	uint64_t bytes;
	uint64_t gpu;
	uint64_t pad;
};

struct gs_front {
	struct gs_fent e[1u << GS_FRONT_BITS]; /* first: an entry's place is the hash, shifted */
	uint32_t busy;   /* owner inside a take */
	uint32_t owner;  /* owning thread id, 0 when free */
	uint32_t revoke; /* a flusher has the front */
	uint32_t cool;   /* allocations left that go to the shared table (owner decrements) */
} __attribute__((aligned(64)));

extern struct gs_front gs_fronts[GS_FRONTS];
extern int gs_front_ok; /* membarrier registered: fronts may be used */

struct gs_front *gs_front_claim(void);
uint64_t gs_front_take_others(uint64_t key);
void gs_front_flush_all(void);
void gs_front_drop(void);

GS_INLINE struct gs_front *gs_front_mine(void)
{
	struct gs_front *f = gs_tls.fr;
	if (GS_LIKELY(f != NULL) || gs_tls.fr_tried)
		return f;
	return gs_front_claim();
}

/* Enter a take from f: 1 when the owner may, 0 while a flusher has it
 * (busy is then 0 again). */
GS_INLINE int gs_front_enter(struct gs_front *f)
{
	__atomic_store_n(&f->busy, 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST); /* a flusher's membarrier fences it */
	if (GS_LIKELY(GS_IS_ZERO(f->revoke))) {
		__atomic_signal_fence(__ATOMIC_ACQUIRE); /* the entries are read after it */
		return 1;
	}
	__atomic_store_n(&f->busy, 0, __ATOMIC_RELEASE);
	return 0;
}

GS_INLINE void gs_front_leave(struct gs_front *f) { __atomic_store_n(&f->busy, 0, __ATOMIC_RELEASE); }

GS_INLINE struct gs_fent *gs_front_ent(struct gs_front *f, uint64_t key)
{
	return &f->e[(key * 0x9E3779B97F4A7C15ull) >> (64 - GS_FRONT_BITS)];
}

/*
 * Record key -> (g, bytes) in front f (this thread's): 1 when recorded
 * there, 0 when its entry is taken or the front is cooling down. No
 * handshake: the owner only fills an empty entry, and a flusher only
 * empties entries it found filled, so the two never write one entry at
 * once (the key is stored last, with release order, and read by the
 * flusher with acquire). An allocation recorded while a flush runs stays
 * in the front, as it would had it come after the flush.
 */
GS_INLINE int gs_front_store(struct gs_front *f, uint64_t key, long g, uint64_t bytes)
{
	struct gs_fent *e = gs_front_ent(f, key);
	if (GS_UNLIKELY(!GS_IS_ZERO(f->cool)) || GS_UNLIKELY(!GS_IS_ZERO(e->key))) /* GS_KEY_EMPTY is 0 */
		return 0;
	__atomic_store_n(&e->bytes, bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&e->gpu, (uint64_t)g, __ATOMIC_RELAXED);
	__atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
	return 1;
}

/* Record key -> (g, bytes) in this thread's front (claimed at its first
 * use): 1 when recorded there, 0 when the caller records it in the shared
 * table. A cooling front counts the allocation down. */
GS_INLINE int gs_front_put(uint64_t key, int g, uint64_t bytes)
{
	struct gs_front *f = gs_front_mine();
	if (GS_UNLIKELY(f == NULL) || GS_UNLIKELY(bytes == 0))
		return 0;
	if (GS_LIKELY(gs_front_store(f, key, g, bytes)))
		return 1;
	uint32_t cool = __atomic_load_n(&f->cool, __ATOMIC_RELAXED);
	if (cool != 0 && gs_front_enter(f)) {
		__atomic_store_n(&f->cool, cool - 1, __ATOMIC_RELAXED);
		gs_front_leave(f);
	}
	return 0;
}

/* Take key out of front f (this thread's), inside the handshake (a flusher
 * may be moving the same entry): 1 and *ep its entry, emptied, whose bytes
 * and GPU are still readable; 0 when it is not there (or a flusher has the
 * front). */
GS_INLINE int gs_front_take_ent(struct gs_front *f, uint64_t key, struct gs_fent **ep)
{
	if (GS_UNLIKELY(!gs_front_enter(f)))
		return 0;
	struct gs_fent *e = gs_front_ent(f, key);
	/* a plain load: inside the handshake no flusher writes the entries */
	if (GS_UNLIKELY(e->key != key)) {
		gs_front_leave(f);
		return 0;
	}
	__atomic_store_n(&e->key, GS_KEY_EMPTY, __ATOMIC_RELAXED);
	gs_front_leave(f);
	*ep = e;
	return 1;
}

/* Take key out of this thread's front: its packed value, 0 when it is not
 * there. */
GS_INLINE uint64_t gs_front_take(uint64_t key)
{
	struct gs_front *f = gs_tls.fr;
	if (GS_UNLIKELY(f == NULL))
		return 0;
	struct gs_fent *e;
	if (!gs_front_take_ent(f, key, &e))
		return 0;
	return gs_val_pack((int)__atomic_load_n(&e->gpu, __ATOMIC_RELAXED), __atomic_load_n(&e->bytes, __ATOMIC_RELAXED));
}

#endif
