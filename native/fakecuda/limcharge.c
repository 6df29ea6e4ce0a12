/*
 * The allocator's side of the memory limits per cgroup (memlimit.c): an
 * allocation on a device that has a limit charges every limit entry of the
 * process's cgroup and its ancestors on that device, each with a
 * compare-and-swap against its hard limit, before the device's capacity; a
 * charge over any hard limit is refused as a driver's out-of-memory is,
 * with nothing charged. What a charge went to (fc_limtok) stays with the
 * allocation, so its free gives back exactly that. The process's own
 * records in the state (limrec) let a sweep give back a dead process's
 * charges.
 *
 * The entries that apply are looked up per device and cached in the
 * process; the cache is refreshed when the state's limit generation
 * changes (an entry made or cleared), so a process moved to another cgroup
 * is charged to its new cgroup from the next change of limits on.
 * Without any limit on a device the allocation path pays one atomic load
 * (fc_charge_lim).
 */
#include "fc_internal.h"

#include <stdlib.h>

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	_Atomic uint32_t gen_plus1; /* lim_gen + 1 the set was made under; 0: none */
	_Atomic(const struct fc_limset *) set;
} cache[FC_MAX_DEVICES];

static const struct fc_limset empty_set;

void fc_lim_after_fork(void)
{
	/* the parent's sets name the parent's records: a child makes its own */
	pthread_mutex_init(&cache_lock, NULL);
	for (unsigned d = 0; d < FC_MAX_DEVICES; d++)
		atomic_store(&cache[d].gen_plus1, 0);
}

/* A record of this process's slot for (ent, gen): its own, a free one, or
 * one whose entry has been cleared since; NULL if all are taken. */
static struct fc_shm_limrec *record_for(uint32_t ent, uint32_t gen)
{
	struct fc_shm_slot *s = fc_slot();
	if (s < &fc_shm->slot[0] || s >= &fc_shm->slot[FC_SHM_SLOTS])
		return NULL; /* the private slot of a process the state had no room for */
	struct fc_shm_limrec *recs = fc_shm->limrec[s - fc_shm->slot], *spare = NULL;
	for (unsigned r = 0; r < FC_LIM_RECS; r++) {
		uint32_t e = atomic_load(&recs[r].ent);
		if (e == ent + 1 && atomic_load(&recs[r].gen) == gen)
			return &recs[r];
		if (spare == NULL &&
		    (e == 0 || (e <= FC_LIM_ENTRIES && atomic_load(&fc_shm->limit[e - 1].gen) != atomic_load(&recs[r].gen))))
			spare = &recs[r];
	}
	if (spare != NULL) {
		atomic_store(&spare->bytes, 0);
		atomic_store(&spare->gen, gen);
		atomic_store(&spare->ent, ent + 1);
	}
	return spare;
}

static const struct fc_limset *current_set(unsigned phys)
{
	uint32_t want = atomic_load_explicit(&fc_shm->lim_gen, memory_order_acquire) + 1;
	if (FC_LIKELY(atomic_load_explicit(&cache[phys].gen_plus1, memory_order_acquire) == want))
		return atomic_load_explicit(&cache[phys].set, memory_order_acquire);
	pthread_mutex_lock(&cache_lock);
	if (fc_lim_lock() == 0) {
		fc_lim_reap_locked(); /* a limit of a removed cgroup is gone */
		fc_lim_unlock();
	}
	want = atomic_load(&fc_shm->lim_gen) + 1;
	uint32_t ent[FC_LIM_DEPTH], gen[FC_LIM_DEPTH];
	unsigned n = fc_lim_applicable(phys, ent, gen);
	const struct fc_limset *set = &empty_set;
	struct fc_limset *ns = n ? calloc(1, sizeof(*ns)) : NULL;
	if (ns != NULL) {
		for (unsigned k = 0; k < n; k++) {
			ns->e[k].ent = ent[k];
			ns->e[k].gen = gen[k];
			ns->e[k].rec = record_for(ent[k], gen[k]);
		}
		ns->n = n;
		set = ns;
	}
	atomic_store(&cache[phys].set, set);
	atomic_store_explicit(&cache[phys].gen_plus1, want, memory_order_release);
	pthread_mutex_unlock(&cache_lock);
	return set;
}

/* Charge bytes under entry k of set; false if over its hard limit. */
static bool entry_charge(const struct fc_limset *set, unsigned k, uint64_t bytes)
{
	struct fc_shm_limit *e = &fc_shm->limit[set->e[k].ent];
	if (atomic_load(&e->gen) != set->e[k].gen)
		return true; /* cleared since: no limit any more */
	uint64_t cur = atomic_load_explicit(&e->used, memory_order_relaxed);
	for (;;) {
		uint64_t hard = atomic_load_explicit(&e->hard, memory_order_relaxed);
		if (bytes > hard || cur > hard - bytes)
			return false;
		if (atomic_compare_exchange_weak_explicit(&e->used, &cur, cur + bytes, memory_order_acq_rel,
							  memory_order_relaxed))
			return true;
	}
}

static void entries_uncharge(const struct fc_limset *set, unsigned upto, uint64_t bytes)
{
	for (unsigned k = 0; k < upto; k++) {
		struct fc_shm_limit *e = &fc_shm->limit[set->e[k].ent];
		if (atomic_load(&e->gen) == set->e[k].gen)
			fc_sub_saturating(&e->used, bytes);
	}
}

static bool charge_entries(const struct fc_limset *set, uint64_t bytes)
{
	for (unsigned k = 0; k < set->n; k++) {
		if (!entry_charge(set, k, bytes)) {
			entries_uncharge(set, k, bytes);
			return false;
		}
	}
	return true;
}

fc_limtok fc_charge_limited(unsigned phys, uint64_t bytes)
{
	const struct fc_limset *set = current_set(phys);
	if (set->n == 0)
		return fc_charge(phys, bytes) ? NULL : FC_LIM_REFUSED;
	if (!charge_entries(set, bytes)) {
		/* a dead process of the cgroup may still hold some: sweep once */
		if (fc_state_sweep_limited() == 0 || !charge_entries(set, bytes))
			return FC_LIM_REFUSED;
	}
	if (!fc_charge(phys, bytes)) {
		entries_uncharge(set, set->n, bytes);
		return FC_LIM_REFUSED;
	}
	for (unsigned k = 0; k < set->n; k++)
		if (set->e[k].rec != NULL)
			atomic_fetch_add_explicit(&set->e[k].rec->bytes, bytes, memory_order_relaxed);
	return set;
}

void fc_uncharge_limited(fc_limtok set, uint64_t bytes)
{
	entries_uncharge(set, set->n, bytes);
	for (unsigned k = 0; k < set->n; k++) {
		struct fc_shm_limrec *rec = set->e[k].rec;
		if (rec != NULL && atomic_load(&rec->ent) == set->e[k].ent + 1 && atomic_load(&rec->gen) == set->e[k].gen)
			fc_sub_saturating(&rec->bytes, bytes);
	}
}

uint64_t fc_ctx_charge(unsigned phys, fc_limtok *tok)
{
	uint64_t n = fc_ctx_bytes;
	*tok = NULL;
	if (n == 0)
		return 0;
	return fc_charge_lim(phys, n, tok) ? n : UINT64_MAX;
}

void fc_ctx_uncharge(unsigned phys, uint64_t bytes, fc_limtok tok)
{
	if (bytes != 0 && bytes != UINT64_MAX)
		fc_uncharge_lim(phys, bytes, tok);
}
