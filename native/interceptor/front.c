/*
 * The slow side of the pointer table's per-thread fronts (front.h has the
 * fast side and the protocol): claiming a front, giving it up at thread
 * exit, and flushing fronts into the shared table when another thread
 * releases a pointer one of them holds, when a context is torn down, and
 * after fork.
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs.h"

struct gs_front gs_fronts[GS_FRONTS];
int gs_front_ok;

static pthread_key_t exit_key;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* Serialises flushers with each other (they are rare: a pointer released
 * by another thread than its allocator, a context teardown). */
static pthread_mutex_t flush_mu = PTHREAD_MUTEX_INITIALIZER;

static void thread_exit(void *arg);

static void front_init(void)
{
	if (pthread_key_create(&exit_key, thread_exit) != 0)
		return;
	gs_front_ok = !gs_plain_path && gs_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
	if (!gs_front_ok)
		gs_debug("%s: every allocation is recorded in the shared table",
			 gs_plain_path ? "GPUSLICE_PLAIN_PATH" : "membarrier unavailable");
}

/* First use by this thread: own a free front if there is one. */
struct gs_front *gs_front_claim(void)
{
	gs_tls.fr_tried = 1;
	pthread_once(&init_once, front_init);
	/* the release's common case calls the real cuMemFree_v2 unchecked */
	if (!gs_front_ok || gs_real_get(GS_R_cuMemFree_v2) == NULL)
		return NULL;
	uint32_t tid = (uint32_t)syscall(SYS_gettid);
	for (unsigned k = 0; k < GS_FRONTS; k++) {
		uint32_t free = 0;
		struct gs_front *f = &gs_fronts[k];
		if (__atomic_compare_exchange_n(&f->owner, &free, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			gs_tls.fr = f;
			gs_tls_hot();
			pthread_setspecific(exit_key, f);
			return f;
		}
	}
	return NULL;
}

/* Move f's entries into the shared table (the caller has f to itself as
 * far as takes go; its owner may still fill empty entries); the entry for
 * key, if there, is taken out and its packed value returned in *found. An
 * entry the shared table has no room for stays in the front. Returns the
 * entries left. */
static unsigned drain(struct gs_front *f, uint64_t key, uint64_t *found)
{
	unsigned left = 0;
	for (unsigned i = 0; i < (1u << GS_FRONT_BITS); i++) {
		struct gs_fent *e = &f->e[i];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY)
			continue;
		int g = (int)__atomic_load_n(&e->gpu, __ATOMIC_RELAXED);
		uint64_t n = __atomic_load_n(&e->bytes, __ATOMIC_RELAXED);
		if (k == key && *found == 0) {
			*found = gs_val_pack(g, n);
		} else if (gs_tab_insert(GS_TAB_PTR, k, g, n) != 0) {
			left++;
			continue;
		}
		__atomic_store_n(&e->key, GS_KEY_EMPTY, __ATOMIC_RELEASE);
	}
	return left;
}

/* f holds at least one entry (read without the handshake: an entry the
 * owner records meanwhile is one recorded after the flush). */
static int holds(const struct gs_front *f)
{
	for (unsigned i = 0; i < (1u << GS_FRONT_BITS); i++)
		if (__atomic_load_n(&f->e[i].key, __ATOMIC_ACQUIRE) != GS_KEY_EMPTY)
			return 1;
	return 0;
}

/*
 * Flush every front but this thread's that holds entries (flush_mu held):
 * mark each, one membarrier, then per front wait for its owner to leave
 * any update, drain it and unmark it. A front flushed for another thread's
 * release is skipped by its owner for its next GS_FRONT_COOL allocations,
 * so that a thread that keeps releasing another's pointers pays this once
 * in a while, not at every release. Returns key's value if a front held it.
 */
static uint64_t flush_fronts(uint64_t key, int cool)
{
	struct gs_front *mine = gs_tls.fr;
	unsigned marked = 0;
	for (unsigned k = 0; k < GS_FRONTS; k++) {
		struct gs_front *f = &gs_fronts[k];
		if (f == mine || !holds(f))
			continue;
		__atomic_store_n(&f->revoke, 1, __ATOMIC_RELEASE);
		marked |= 1u << k;
	}
	if (marked == 0)
		return 0;
	if (gs_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
		/* cannot order the owners' updates: leave the fronts alone */
		for (unsigned k = 0; k < GS_FRONTS; k++)
			if (marked & (1u << k))
				__atomic_store_n(&gs_fronts[k].revoke, 0, __ATOMIC_RELEASE);
		return 0;
	}
	uint64_t found = 0;
	for (unsigned k = 0; k < GS_FRONTS; k++) {
		if (!(marked & (1u << k)))
			continue;
		struct gs_front *f = &gs_fronts[k];
		if (gs_wait_zero32(&f->busy)) {
			drain(f, key, &found);
			if (cool)
				__atomic_store_n(&f->cool, GS_FRONT_COOL, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&f->revoke, 0, __ATOMIC_RELEASE);
	}
	return found;
}

/* key was in neither this thread's front nor the shared table. A flusher
 * may be moving it from one to the other (this thread's own front
 * included): once flush_mu is ours no flush is under way, so look in both
 * again, then in the other threads' fronts. Its value, 0 when no front
 * holds it either. */
uint64_t gs_front_take_others(uint64_t key)
{
	if (!gs_front_ok)
		return 0;
	pthread_mutex_lock(&flush_mu);
	uint64_t v = gs_front_take(key);
	if (v == 0)
		v = gs_tab_remove(GS_TAB_PTR, key);
	if (v == 0)
		v = flush_fronts(key, 1);
	pthread_mutex_unlock(&flush_mu);
	return v;
}

/* Before walking the shared table (a context teardown): every front's
 * entries, this thread's included, go into it. */
void gs_front_flush_all(void)
{
	if (!gs_front_ok)
		return;
	pthread_mutex_lock(&flush_mu);
	flush_fronts(GS_KEY_EMPTY, 0);
	struct gs_front *mine = gs_tls.fr;
	uint64_t none = 0;
	if (mine != NULL && holds(mine) && gs_front_enter(mine)) {
		drain(mine, GS_KEY_EMPTY, &none);
		gs_front_leave(mine);
	}
	pthread_mutex_unlock(&flush_mu);
}

/* Thread exit: its entries go to the shared table (other threads may
 * release them) and the front to the next thread that wants one. */
static void thread_exit(void *arg)
{
	struct gs_front *f = arg;
	if (f == NULL || gs_tls.fr != f)
		return;
	pthread_mutex_lock(&flush_mu);
	unsigned left = 1;
	uint64_t none = 0;
	if (gs_front_enter(f)) {
		left = drain(f, GS_KEY_EMPTY, &none);
		gs_front_leave(f);
	}
	if (left == 0) {
		__atomic_store_n(&f->cool, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&f->owner, 0, __ATOMIC_RELEASE);
	}
	/* else the shared table was full: the front keeps them, unowned, and
	 * other threads' releases still find them there */
	pthread_mutex_unlock(&flush_mu);
	gs_tls.fr = NULL;
	gs_tls_hot();
}

/* After fork (child, single-threaded): the parent's allocations are
 * forgotten, and so are its threads' fronts. */
void gs_front_drop(void)
{
	memset(gs_fronts, 0, sizeof(gs_fronts));
	gs_tls.fr = NULL;
	gs_tls.fr_tried = 0;
	gs_tls_hot();
	pthread_mutex_init(&flush_mu, NULL);
}
