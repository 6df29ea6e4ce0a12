/*
 * The slow side of charging (credit.h has the fast side; docs/ledger.md
 * "Credit" the protocol): which stripe a thread owns, the exact path on
 * gpu[g].used, and giving the credit back at thread exit. Taking every
 * thread's credit back before a denial, and what the session really
 * holds, are in credit_take.c.
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs.h"
#include "notice.h"

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static int exit_key_ok;

static void thread_exit(void *arg);

static void make_exit_key(void) { exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0; }

static uint32_t my_tid(void) { return (uint32_t)syscall(SYS_gettid); }

long gs_membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

/* After each attach: threads keep credit only if a taker can fence them. */
void gs_credit_attach(void)
{
	pthread_once(&exit_once, make_exit_key);
	gs.credit_ok = exit_key_ok && !gs_plain_path && gs_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
	if (!gs.credit_ok)
		gs_debug("%s: every charge takes the exact path", gs_plain_path ? "GPUSLICE_PLAIN_PATH" : "membarrier unavailable");
}

/* Whether this process's slot is marked in the credit map (a slot the
 * map does not cover is read by every scan anyway). */
static int slot_marked(void)
{
	uint32_t i = gs.slot_index;
	if (i >= GS_CREDIT_MAP_SLOTS)
		return 1;
	return (__atomic_load_n(&GS_CREDIT_MAP(gs.ctr)[i / 64], __ATOMIC_ACQUIRE) >> (i % 64)) & 1;
}

/* Before a thread of this process first keeps credit: mark its slot in
 * the credit map (once), so that every scan reads it. */
static void mark_credit(void)
{
	uint32_t i = gs.slot_index;
	if (!slot_marked())
		__atomic_fetch_or(&GS_CREDIT_MAP(gs.ctr)[i / 64], 1ull << (i % 64), __ATOMIC_SEQ_CST);
}

/* This thread's copy of the credit it may keep per GPU (limit / 8), 0
 * while the slot is not marked: the first credit then takes the slow
 * path (gs_unreserve_slow), which marks it. */
static void refresh_caps(void)
{
	int on = slot_marked();
	for (uint32_t g = 0; g < gs.ngpus && g < GS_MAX_GPUS; g++)
		gs_tls.cap[g] = on ? __atomic_load_n(&gs.lim->gpu[g].limit, __ATOMIC_RELAXED) >> 3 : 0;
}

/* First charge of a thread since the attach: own a free stripe if there
 * is one (the thread then keeps credit there), else use the shared one.
 * Only once the entry points cuMemAlloc_v2's common case calls unchecked
 * are known (hooks_ptr.c: an owned stripe implies them). */
struct gs_slot_stripe *gs_own_slow(void)
{
	gs_tls.st = NULL;
	gs_tls.epoch = gs.epoch;
	gs_tls_hot();
	if (!gs.credit_ok || gs.slot == NULL || gs.lim == NULL || gs_real_get(GS_R_cuMemAlloc_v2) == NULL ||
	    gs_real_get(GS_R_cuCtxGetDevice) == NULL)
		return NULL;
	refresh_caps();
	uint32_t tid = my_tid();
	for (unsigned k = 0; k < GS_SLOT_OWNED; k++) {
		uint32_t free = 0;
		if (__atomic_compare_exchange_n(&gs.slot->stripe[k].owner, &free, tid, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			gs_tls.st = &gs.slot->stripe[k];
			__atomic_fetch_or(&gs.slot->owned, 1u << k, __ATOMIC_RELEASE);
			pthread_setspecific(exit_key, gs_tls.st);
			break;
		}
	}
	gs_tls_hot();
	return gs_tls.st;
}

/* Thread exit: give the credit back and let another thread own the stripe
 * (what the stripe holds stays: other threads may free it). */
static void thread_exit(void *arg)
{
	struct gs_slot_stripe *s = arg;
	if (s == NULL || gs_tls.epoch != gs.epoch || gs_tls.st != s)
		return;
	if (gs_enter(s)) {
		for (uint32_t g = 0; g < gs.ngpus; g++) {
			uint64_t h = __atomic_load_n(&s->held[g], __ATOMIC_RELAXED);
			uint64_t c = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED) - h;
			if (c != 0) {
				__atomic_store_n(&s->lease[g], h, __ATOMIC_RELAXED);
				gs_sub_floor(&gs.ctr->gpu[g].used, c, __ATOMIC_RELEASE);
			}
		}
		gs_leave(s);
	}
	gs_tls.st = NULL;
	gs_tls_hot();
	__atomic_fetch_and(&gs.slot->owned, ~(1u << (unsigned)(s - gs.slot->stripe)), __ATOMIC_RELEASE);
	__atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
}

static void raise_peak(struct gs_counter_gpu *c, uint64_t now)
{
	uint64_t peak = __atomic_load_n(&c->peak, __ATOMIC_RELAXED);
	while (now > peak &&
	       !__atomic_compare_exchange_n(&c->peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* This thread's stripe when it owns one already; never claims one. */
static struct gs_slot_stripe *own_if_any(void)
{
	return gs_tls.epoch == gs.epoch ? gs_tls.st : NULL;
}

/* The exact path: spend what credit there is, take the rest from used
 * with a CAS against the limit. 0, or -1 when it does not fit. A thread
 * without a stripe claims one when claim is set. */
static int reserve_exact(int g, uint64_t n, int claim)
{
	uint64_t limit = __atomic_load_n(&gs.lim->gpu[g].limit, __ATOMIC_ACQUIRE);
	struct gs_counter_gpu *c = &gs.ctr->gpu[g];
	struct gs_slot_stripe *s = claim ? gs_own() : own_if_any();
	if (s != NULL && !gs_enter(s))
		s = NULL;
	uint64_t h = 0, have = 0;
	if (s != NULL) {
		h = __atomic_load_n(&s->held[g], __ATOMIC_RELAXED);
		have = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED) - h;
		if (have >= n) {
			__atomic_store_n(&s->held[g], h + n, __ATOMIC_RELAXED);
			gs_raised(s, n);
			gs_leave(s);
			return 0;
		}
	}
	uint64_t want = n - have;
	uint64_t used = __atomic_load_n(&c->used, __ATOMIC_RELAXED);
	do {
		if (want > limit || used > limit - want) {
			if (s != NULL)
				gs_leave(s);
			return -1;
		}
	} while (!__atomic_compare_exchange_n(&c->used, &used, used + want, 1, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	if (s != NULL) {
		__atomic_store_n(&s->lease[g], __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED) + want,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&s->held[g], h + n, __ATOMIC_RELAXED);
		gs_raised(s, n);
		gs_leave(s);
	} else {
		struct gs_slot_stripe *sh = &gs.slot->stripe[GS_SLOT_SHARED];
		__atomic_fetch_add(&sh->lease[g], n, __ATOMIC_RELAXED);
		__atomic_fetch_add(&sh->held[g], n, __ATOMIC_RELAXED);
		__atomic_fetch_add(&sh->raised, n, __ATOMIC_RELEASE); /* after held: gs_raised */
	}
	raise_peak(c, used + want);
	return 0;
}

static int reserve(int g, uint64_t n, int claim)
{
	refresh_caps();
	if (claim) /* not for a context's cost: the driver already holds it */
		gs_settle(g, n);
	if (reserve_exact(g, n, claim) == 0)
		return 0;
	if (gs.credit_ok) {
		gs_take_all_credit();
		if (reserve_exact(g, n, claim) == 0)
			return 0;
	}
	/* pools of g keep freed memory still charged: trim them, give back
	 * what they let go of, and try again */
	if (gs_kept_refresh(g, 1) != 0 && reserve_exact(g, n, claim) == 0)
		return 0;
	__atomic_fetch_add(&gs.ctr->gpu[g].denied, 1, __ATOMIC_RELAXED);
	gs_notice_refused(g, n, claim);
	return -1;
}

int gs_reserve_slow(int g, uint64_t n) { return reserve(g, n, 1); }

/* A charge made once, not by a thread that allocates as it goes (a
 * context's cost, charged by whichever thread creates the context): it
 * claims no stripe, so that a thread that only created the context (a
 * program's main thread, often) does not keep one of the GS_SLOT_OWNED
 * stripes from the threads that allocate. */
int gs_reserve_once(int g, uint64_t n) { return reserve(g, n, 0); }

/* used -= n, floored at 0; 1 when it floored (used held less than n). */
static int give_back(uint64_t *used, uint64_t n)
{
	uint64_t v = __atomic_load_n(used, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(used, &v, v > n ? v - n : 0, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	return v < n;
}

/* A release that is not the plain case: on the shared stripe, or with
 * more credit than the owner keeps (the excess goes back to used). */
static void unreserve(int g, uint64_t n, int claim)
{
	struct gs_slot_stripe *s = claim ? gs_own() : own_if_any();
	if (s != NULL) {
		mark_credit(); /* before the first credit is kept, not inside the update */
		refresh_caps();
	}
	if (s != NULL && gs_enter(s)) {
		uint64_t h = __atomic_load_n(&s->held[g], __ATOMIC_RELAXED) - n;
		uint64_t l = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED);
		uint64_t cap = gs_tls.cap[g];
		uint64_t c = l - h;
		__atomic_store_n(&s->held[g], h, __ATOMIC_RELAXED);
		if (c > cap && c <= INT64_MAX) {
			/* used below what is given back: the daemon re-based it, and
			 * the credit left is counted nowhere: drop it */
			if (give_back(&gs.ctr->gpu[g].used, c - cap))
				l = h + (c - cap);
			__atomic_store_n(&s->lease[g], l - (c - cap), __ATOMIC_RELAXED);
		}
		gs_leave(s);
		return;
	}
	struct gs_slot_stripe *sh = &gs.slot->stripe[GS_SLOT_SHARED];
	__atomic_fetch_sub(&sh->held[g], n, __ATOMIC_RELAXED); /* may wrap: the slot's sum counts */
	__atomic_fetch_sub(&sh->lease[g], n, __ATOMIC_RELAXED);
	gs_sub_floor(&gs.ctr->gpu[g].used, n, __ATOMIC_RELEASE);
}

void gs_unreserve_slow(int g, uint64_t n) { unreserve(g, n, 1); }

/* Give back what gs_reserve_once charged (claims no stripe either). */
void gs_unreserve_once(int g, uint64_t n) { unreserve(g, n, 0); }

/* Charge n bytes the driver already holds on ledger GPU g, over the limit
 * if need be (memory that exists is counted; the audit decides). */
void gs_charge_force(int g, uint64_t n)
{
	struct gs_counter_gpu *c = &gs.ctr->gpu[g];
	uint64_t now = __atomic_add_fetch(&c->used, n, __ATOMIC_ACQ_REL);
	struct gs_slot_stripe *sh = &gs.slot->stripe[GS_SLOT_SHARED];
	__atomic_fetch_add(&sh->lease[g], n, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sh->held[g], n, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sh->raised, n, __ATOMIC_RELEASE); /* after held: gs_raised */
	raise_peak(c, now);
}
