/*
 * Charging on the hot path (docs/ledger.md "Credit"): a thread that owns a
 * stripe of the process's slot keeps the bytes it releases as credit
 * (they stay counted in gpu[g].used) and spends that credit on its next
 * allocations, with plain loads and stores on its own stripe: no locked
 * instruction, no shared cache line written. Everything else (no stripe
 * of its own, not enough credit, the credit being taken back, too much
 * credit kept) goes to credit.c: the exact path, a compare-and-swap on
 * gpu[g].used against the limit, and before any denial the credit of every
 * thread of the session taken back.
 *
 * The owner writes `busy` around each update and reads `revoke` between;
 * whoever takes credit back sets `revoke`, runs membarrier (which orders
 * the owner's store before its load as a fence would), then waits for
 * `busy` to be 0 (credit.c). Included from gs.h.
 */
#ifndef GPUSLICE_CREDIT_H
#define GPUSLICE_CREDIT_H

struct gs_slot_stripe *gs_own_slow(void);
int gs_reserve_slow(int g, uint64_t n);
void gs_unreserve_slow(int g, uint64_t n);
void gs_charge_force(int g, uint64_t n);
uint64_t gs_real_used(int g);
void gs_credit_attach(void);
long gs_membarrier(int cmd);
int gs_wait_zero32(const uint32_t *w); /* bounded wait until *w is 0: 1 when it is */

/* This thread's own stripe, NULL when it has none (it then uses the
 * shared stripe, exactly). A thread-local load and a compare. */
GS_INLINE struct gs_slot_stripe *gs_own(void)
{
	if (GS_LIKELY(gs_tls.epoch == gs.epoch))
		return gs_tls.st;
	return gs_own_slow();
}

/* Enter an update of stripe s: 1 when the owner may write it, 0 when its
 * credit is being taken back (busy is then 0 again). */
GS_INLINE int gs_enter(struct gs_slot_stripe *s)
{
	__atomic_store_n(&s->busy, 1, __ATOMIC_RELAXED);
	/* no fence: a taker's membarrier orders this store before the load */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (GS_LIKELY(__atomic_load_n(&s->revoke, __ATOMIC_ACQUIRE) == 0))
		return 1;
	__atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
	return 0;
}

GS_INLINE void gs_leave(struct gs_slot_stripe *s) { __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE); }

/* Spend n bytes of the credit the owner of stripe s keeps on ledger GPU
 * g: 1 when it covered them, 0 when it does not (nothing changed). */
GS_INLINE int gs_credit_spend(struct gs_slot_stripe *s, int g, uint64_t n)
{
	if (GS_UNLIKELY(!gs_enter(s)))
		return 0;
	uint64_t h = __atomic_load_n(&s->held[g], __ATOMIC_RELAXED);
	int ok = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED) - h >= n;
	if (GS_LIKELY(ok))
		__atomic_store_n(&s->held[g], h + n, __ATOMIC_RELAXED);
	gs_leave(s);
	return ok;
}

/* Reserve n bytes on ledger GPU g: 0 on success, -1 when they do not fit
 * in the limit less what the session really holds. */
GS_INLINE int gs_reserve(int g, uint64_t n)
{
	struct gs_slot_stripe *s = gs_own();
	if (GS_LIKELY(s != NULL) && GS_LIKELY(gs_credit_spend(s, g, n)))
		return 0;
	return gs_reserve_slow(g, n);
}

/* Give back n bytes on ledger GPU g: kept as credit up to the thread's cap
 * (an eighth of the limit; 0 until credit.c marked the slot in the credit
 * map, so that the first credit a thread keeps takes the slow path), the
 * rest returned to gpu[g].used. */
GS_INLINE void gs_unreserve(int g, uint64_t n)
{
	struct gs_slot_stripe *s = gs_own();
	if (GS_LIKELY(s != NULL) && GS_LIKELY(gs_enter(s))) {
		uint64_t h = __atomic_load_n(&s->held[g], __ATOMIC_RELAXED) - n;
		uint64_t l = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED);
		if (GS_LIKELY(l - h <= gs_tls.cap[g])) {
			__atomic_store_n(&s->held[g], h, __ATOMIC_RELAXED);
			gs_leave(s);
			return;
		}
		gs_leave(s);
	}
	gs_unreserve_slow(g, n);
}

#endif
