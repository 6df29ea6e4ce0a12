/*
 * Reading and taking back the credit threads keep (docs/ledger.md
 * "Credit"): before any denial every owned stripe of the session that
 * keeps credit gives it back to gpu[g].used (gs_take_all_credit), and the
 * memory queries subtract what is still kept (gs_real_used).
 */
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs.h"

/* How long a taker (of credit here, of a pointer-table front in front.c)
 * waits for an owner inside an update, or for another taker, before it
 * leaves that stripe or front alone: rounds of sched_yield. */
#define GS_TAKE_SPINS 20000

/* The slots worth reading: those ever claimed (slot_hwm), at most nslots. */
static uint32_t scan_slots(struct gs_counters_hdr *hdr)
{
	uint32_t n = __atomic_load_n(&hdr->nslots, __ATOMIC_RELAXED);
	uint32_t hwm = __atomic_load_n(&hdr->slot_hwm, __ATOMIC_ACQUIRE);
	return hwm < n ? hwm : n;
}

/* The first slot from i (below n) that may keep credit: marked in the
 * credit map, or past what the map covers; n when there is none. */
static uint32_t next_credit_slot(const struct gs_counters_hdr *hdr, uint32_t i, uint32_t n)
{
	const uint64_t *map = GS_CREDIT_MAP(hdr);
	while (i < n && i < GS_CREDIT_MAP_SLOTS) {
		uint64_t w = __atomic_load_n(&map[i / 64], __ATOMIC_ACQUIRE) >> (i % 64);
		if (w != 0)
			return i + (uint32_t)__builtin_ctzll(w);
		i = (i | 63) + 1;
	}
	return i < n ? i : n;
}

#define FOR_CREDIT_SLOTS(hdr, i, n) \
	for (uint32_t i = next_credit_slot(hdr, 0, n); i < (n); i = next_credit_slot(hdr, i + 1, n))

/* The owned stripes of slot sl that have an owner (only those keep credit:
 * an owner gives its credit back before its bit is cleared). */
static uint32_t owned_of(const struct gs_slot *sl)
{
	return __atomic_load_n(&sl->owned, __ATOMIC_ACQUIRE) & ((1u << GS_SLOT_OWNED) - 1);
}

/* Wait (bounded) until the 32-bit (wide: 64-bit) word at w is 0; 1 when
 * it is. */
static int wait_zero(const void *w, int wide)
{
	for (int i = 0; i < GS_TAKE_SPINS; i++) {
		uint64_t v = wide ? __atomic_load_n((const uint64_t *)w, __ATOMIC_ACQUIRE)
				  : __atomic_load_n((const uint32_t *)w, __ATOMIC_ACQUIRE);
		if (v == 0)
			return 1;
		sched_yield();
	}
	return 0;
}

int gs_wait_zero32(const uint32_t *w) { return wait_zero(w, 0); }

static uint64_t stripe_credit(const struct gs_slot_stripe *s, uint32_t g)
{
	uint64_t c = __atomic_load_n(&s->lease[g], __ATOMIC_RELAXED) -
		     __atomic_load_n(&s->held[g], __ATOMIC_RELAXED);
	return c > INT64_MAX ? 0 : c;
}

static int has_credit(const struct gs_slot_stripe *s)
{
	for (uint32_t g = 0; g < gs.ngpus; g++)
		if (stripe_credit(s, g) != 0)
			return 1;
	return 0;
}

/*
 * Take back the credit of every owned stripe of every slot of the session
 * (this thread's included), on every GPU: mark each stripe that keeps some
 * (revoke = our tid), one membarrier, then per marked stripe wait for its
 * owner to leave any update, move its credit back to used, unmark. Stripes
 * another taker has marked are waited for, so that what it gives back is
 * in used when this returns.
 */
void gs_take_all_credit(void)
{
	struct gs_counters_hdr *hdr = gs.ctr;
	uint32_t nslots = scan_slots(hdr);
	uint64_t me = (uint32_t)syscall(SYS_gettid);
	unsigned marked = 0, others = 0;
	FOR_CREDIT_SLOTS(hdr, i, nslots) {
		struct gs_slot *sl = GS_SLOT_AT(hdr, i); /* a free slot keeps nothing */
		for (uint32_t m = owned_of(sl); m != 0; m &= m - 1) {
			struct gs_slot_stripe *s = &sl->stripe[__builtin_ctz(m)];
			if (!has_credit(s))
				continue;
			uint64_t zero = 0;
			if (__atomic_compare_exchange_n(&s->revoke, &zero, me, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED))
				marked++;
			else
				others++;
		}
	}
	if (marked == 0 && others == 0)
		return;
	if (marked != 0 && gs_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
	    gs_membarrier(MEMBARRIER_CMD_GLOBAL) != 0) {
		/* cannot order the owners' updates: take nothing */
		gs_debug("membarrier failed; credit not taken back");
		FOR_CREDIT_SLOTS(hdr, i, nslots)
			for (unsigned k = 0; k < GS_SLOT_OWNED; k++) {
				uint64_t *rv = &GS_SLOT_AT(hdr, i)->stripe[k].revoke;
				if (__atomic_load_n(rv, __ATOMIC_RELAXED) == me)
					__atomic_store_n(rv, 0, __ATOMIC_RELEASE);
			}
		return;
	}
	FOR_CREDIT_SLOTS(hdr, i, nslots) {
		struct gs_slot *sl = GS_SLOT_AT(hdr, i);
		for (unsigned k = 0; k < GS_SLOT_OWNED; k++) {
			struct gs_slot_stripe *s = &sl->stripe[k];
			uint64_t rv = __atomic_load_n(&s->revoke, __ATOMIC_ACQUIRE);
			if (rv == 0)
				continue;
			if (rv != me) {
				wait_zero(&s->revoke, 1); /* another taker; bounded */
				continue;
			}
			if (gs_wait_zero32(&s->busy)) {
				for (uint32_t g = 0; g < gs.ngpus; g++) {
					uint64_t h = __atomic_load_n(&s->held[g], __ATOMIC_ACQUIRE);
					uint64_t c = __atomic_load_n(&s->lease[g], __ATOMIC_ACQUIRE) - h;
					if (c == 0 || c > INT64_MAX)
						continue;
					__atomic_store_n(&s->lease[g], h, __ATOMIC_RELEASE);
					gs_sub_floor(&hdr->gpu[g].used, c, __ATOMIC_RELEASE);
				}
			}
			__atomic_store_n(&s->revoke, 0, __ATOMIC_RELEASE);
		}
	}
}

/* What the session really holds on ledger GPU g: used less the credit
 * every owned stripe of every slot keeps. The daemon's reclaim of a dead
 * process's slot takes its leases before it takes used down (and marks
 * the slot reclaiming for that time): a reading across it would count
 * the dead process's credit as held, so it is taken again (bounded; the
 * last stands) while a slot is reclaiming or used moved under it. */
uint64_t gs_real_used(int g)
{
	struct gs_counters_hdr *hdr = gs.ctr;
	uint64_t used = 0, credit = 0;
	for (int try = 0; try < 64; try++) {
		int reclaiming = 0;
		used = __atomic_load_n(&hdr->gpu[g].used, __ATOMIC_ACQUIRE);
		credit = 0;
		uint32_t nslots = scan_slots(hdr);
		FOR_CREDIT_SLOTS(hdr, i, nslots) {
			struct gs_slot *sl = GS_SLOT_AT(hdr, i); /* a free slot keeps nothing */
			for (uint32_t m = owned_of(sl); m != 0; m &= m - 1)
				credit += stripe_credit(&sl->stripe[__builtin_ctz(m)], (uint32_t)g);
			if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) == GS_SLOT_RECLAIMING)
				reclaiming = 1;
		}
		if (!reclaiming && __atomic_load_n(&hdr->gpu[g].used, __ATOMIC_ACQUIRE) == used)
			break;
		sched_yield();
	}
	return used > credit ? used - credit : 0;
}
