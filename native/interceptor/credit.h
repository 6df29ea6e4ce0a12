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
 * The owner writes `busy` around each spend and reads `revoke` between;
 * whoever takes credit back sets `revoke`, runs membarrier (which orders
 * the owner's store before its load as a fence would), then waits for
 * `busy` to be 0 (credit.c). A release needs no handshake
 * (gs_credit_keep). Included from gs.h.
 */
#ifndef GPUSLICE_CREDIT_H
#define GPUSLICE_CREDIT_H

struct gs_slot_stripe *gs_own_slow(void);
int gs_reserve_slow(int g, uint64_t n);
void gs_unreserve_slow(int g, uint64_t n);
int gs_reserve_once(int g, uint64_t n);
void gs_unreserve_once(int g, uint64_t n);
void gs_charge_force(int g, uint64_t n);
uint64_t gs_real_used(int g);
void gs_credit_attach(void);
long gs_membarrier(int cmd);
int gs_wait_zero32(const uint32_t *w); /* bounded wait until *w is 0: 1 when it is */
void gs_take_all_credit(void);         /* every thread's credit back to used (credit_take.c) */

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
	if (GS_LIKELY(GS_IS_ZERO(s->revoke))) {
		__atomic_signal_fence(__ATOMIC_ACQUIRE); /* held and lease are read after it */
		return 1;
	}
	__atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
	return 0;
}

GS_INLINE void gs_leave(struct gs_slot_stripe *s) { __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE); }

/* n bytes were just added to a held of stripe s, owned by this thread:
 * count them in raised (on the line busy is written on). After the store
 * to held, with release order: gpusliced reads raised, then held, so a
 * held its read missed is counted in what raised grows by until its next
 * read (docs/ledger.md "Driver memory"). On x86, which keeps stores in
 * order, a compiler barrier and a plain add (one instruction: only this
 * thread writes the stripe, and the stripe changes hands through the
 * owner word's release and acquire). */
GS_INLINE void gs_raised(struct gs_slot_stripe *s, uint64_t n)
{
#if defined(__x86_64__)
	__atomic_signal_fence(__ATOMIC_RELEASE);
	s->raised += n;
#else
	__atomic_store_n(&s->raised, __atomic_load_n(&s->raised, __ATOMIC_RELAXED) + n, __ATOMIC_RELEASE);
#endif
}

/* Spend n bytes of the credit the owner of stripe s keeps on ledger GPU
 * g: 1 when it covered them, 0 when it does not (nothing changed). */
GS_INLINE int gs_credit_spend(struct gs_slot_stripe *s, long g, uint64_t n)
{
	if (GS_UNLIKELY(!gs_enter(s)))
		return 0;
	uint64_t *held = &s->held[g], *lease = held + GS_MAX_GPUS;
	uint64_t h = __atomic_load_n(held, __ATOMIC_RELAXED);
	int ok = __atomic_load_n(lease, __ATOMIC_RELAXED) - h >= n;
	if (GS_LIKELY(ok)) {
		__atomic_store_n(held, h + n, __ATOMIC_RELAXED);
		gs_raised(s, n);
	}
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

/*
 * Keep n bytes released on ledger GPU g as credit of stripe s (this
 * thread's): 1 when done, 0 when that would keep more than the thread's
 * cap (nothing changed). No handshake: the owner only lowers held, and a
 * taker only reads held and lowers lease to it, so whichever of the two
 * stores comes first, lease - held is what the owner still keeps and
 * gpu[g].used still counts it (docs/ledger.md "Credit"). The cap is the
 * thread's copy of limit / 8 (refreshed on its slow paths; 0 until the
 * process has marked its slot in the ledger's credit map, so that the
 * first credit a thread keeps takes the slow path, which marks it); a
 * stale one changes how much credit is kept, never used or the limit.
 * gs_credit_keep_check decides and works out the new held (*hp), which
 * the owner may store later (cuMemFree_v2 stores it once the driver has
 * freed): nobody else writes held meanwhile.
 */
GS_INLINE int gs_credit_keep_check(struct gs_slot_stripe *s, long g, uint64_t n, uint64_t *hp)
{
	uint64_t *held = &s->held[g], *lease = held + GS_MAX_GPUS;
	uint64_t h = __atomic_load_n(held, __ATOMIC_RELAXED) - n;
	__asm__("" : "+r"(h)); /* keep lease - h as written: h is needed too */
	*hp = h;
	return __atomic_load_n(lease, __ATOMIC_RELAXED) - h <= gs_tls.cap[g];
}

GS_INLINE int gs_credit_keep(struct gs_slot_stripe *s, long g, uint64_t n)
{
	uint64_t h;
	if (GS_UNLIKELY(!gs_credit_keep_check(s, g, n, &h)))
		return 0;
	__atomic_store_n(&s->held[g], h, __ATOMIC_RELAXED);
	return 1;
}

/* Give back n bytes on ledger GPU g: kept as credit up to an eighth of the
 * limit, the rest returned to gpu[g].used. */
GS_INLINE void gs_unreserve(int g, uint64_t n)
{
	struct gs_slot_stripe *s = gs_own();
	if (GS_LIKELY(s != NULL) && GS_LIKELY(gs_credit_keep(s, g, n)))
		return;
	gs_unreserve_slow(g, n);
}

#endif
