/*
 * Per-process allocation tables: device pointer -> (bytes, ledger GPU).
 * Lock-free open addressing in MAP_NORESERVE memory
 * (only touched pages cost anything). A slot is claimed by a CAS on its key
 * (empty or tombstone -> key) and released by a CAS key -> tombstone, so a
 * pointer freed twice concurrently is released once. Probing is bounded;
 * when all GS_PROBE slots of a key's window are live the entry goes to a
 * small mutex-protected overflow array, which is only looked at while it
 * holds something.
 *
 * Keys never return to empty, so a lookup may stop at the first empty slot:
 * an entry in the overflow array had a window without any empty slot.
 * The fast paths are inline in ptrtab.h.
 *
 * Also here: the four-word tables (the same claim and release, no overflow
 * array): VMM physical handle -> (GPU, bytes, references), mapped address
 * -> (handle, size), array and mipmapped array handle -> (GPU and bytes,
 * context); and the memory pool -> device table.
 */
#include <string.h>
#include <sys/mman.h>

#include "gs.h"

static const unsigned gs_tab_bits[GS_NTAB] = {
	[GS_TAB_PTR] = GS_TAB_BITS,
};

static const unsigned gs_xtab_bits[GS_NXTAB] = {
	[GS_XTAB_HANDLE] = 16,
	[GS_XTAB_MAP] = 16,
	[GS_XTAB_ARRAY] = 16,
	[GS_XTAB_MIPMAP] = 14,
	[GS_XTAB_GRAPH] = 12,
	[GS_XTAB_GEXEC] = 12,
};

struct gs_tab gs_tabs[GS_NTAB];
struct gs_xtab gs_xtabs[GS_NXTAB];
pthread_mutex_t gs_map_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t gs_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
uint64_t gs_nmapped;
static void *tab_mem;
static size_t tab_len;

static size_t xtab_bytes(int k) { return ((size_t)1 << gs_xtab_bits[k]) * sizeof(struct gs_xent); }

static size_t tab_bytes(int k)
{
	return ((size_t)1 << gs_tab_bits[k]) * sizeof(struct gs_ent) +
	       GS_OVF_ENTRIES * sizeof(struct gs_ent);
}

int gs_tab_init(void)
{
	if (tab_mem != NULL)
		return 0;
	size_t len = 0;
	for (int k = 0; k < GS_NTAB; k++)
		len += tab_bytes(k);
	for (int k = 0; k < GS_NXTAB; k++)
		len += xtab_bytes(k);
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED)
		return -1;
	char *p = m;
	for (int k = 0; k < GS_NTAB; k++) {
		struct gs_tab *t = &gs_tabs[k];
		t->e = (struct gs_ent *)p;
		t->ovf = t->e + ((size_t)1 << gs_tab_bits[k]);
		t->shift = 64 - gs_tab_bits[k];
		t->mask = ((uint64_t)1 << gs_tab_bits[k]) - 1;
		t->novf = 0;
		pthread_mutex_init(&t->mu, NULL);
		p += tab_bytes(k);
	}
	for (int k = 0; k < GS_NXTAB; k++) {
		struct gs_xtab *t = &gs_xtabs[k];
		t->e = (struct gs_xent *)p;
		t->shift = 64 - gs_xtab_bits[k];
		t->mask = ((uint64_t)1 << gs_xtab_bits[k]) - 1;
		p += xtab_bytes(k);
	}
	tab_mem = m;
	tab_len = len;
	return 0;
}

static void pool_drop(void);

/* After fork (child, single-threaded): forget the parent's allocations. */
void gs_tab_drop(void)
{
	if (tab_mem != NULL)
		munmap(tab_mem, tab_len);
	tab_mem = NULL;
	tab_len = 0;
	for (int k = 0; k < GS_NTAB; k++) {
		gs_tabs[k].e = NULL;
		gs_tabs[k].ovf = NULL;
		gs_tabs[k].novf = 0;
		pthread_mutex_init(&gs_tabs[k].mu, NULL);
	}
	for (int k = 0; k < GS_NXTAB; k++)
		gs_xtabs[k].e = NULL;
	gs_front_drop();
	pthread_mutex_init(&gs_map_mu, NULL);
	pthread_mutex_init(&gs_ctx_mu, NULL);
	gs_nmapped = 0;
	pool_drop();
	gs_ctxcost_drop();
	gs_graph_drop();
}

int gs_tab_insert_slow(struct gs_tab *t, uint64_t key, uint64_t val)
{
	int rv = -1;
	pthread_mutex_lock(&t->mu);
	for (unsigned i = 0; i < GS_OVF_ENTRIES; i++) {
		if (t->ovf[i].key == GS_KEY_EMPTY) {
			t->ovf[i].key = key;
			t->ovf[i].val = val;
			__atomic_fetch_add(&t->novf, 1, __ATOMIC_RELEASE);
			rv = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->mu);
	return rv;
}

uint64_t gs_tab_remove_slow(struct gs_tab *t, uint64_t key)
{
	uint64_t v = 0;
	pthread_mutex_lock(&t->mu);
	for (unsigned i = 0; i < GS_OVF_ENTRIES; i++) {
		if (t->ovf[i].key == key) {
			v = t->ovf[i].val;
			t->ovf[i].key = GS_KEY_EMPTY;
			__atomic_fetch_sub(&t->novf, 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&t->mu);
	return v;
}

/* ---- VMM tables ---- */

static uint64_t xtab_hash(const struct gs_xtab *t, uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ull) >> t->shift;
}

struct gs_xent *gs_xtab_insert(int kind, uint64_t key, uint64_t a, uint64_t b)
{
	struct gs_xtab *t = &gs_xtabs[kind];
	if (key == GS_KEY_EMPTY || key == GS_KEY_TOMB || t->e == NULL)
		return NULL;
	uint64_t h = xtab_hash(t, key);
	for (unsigned i = 0; i < GS_XPROBE; i++) {
		struct gs_xent *e = &t->e[(h + i) & t->mask];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		while (k == GS_KEY_EMPTY || k == GS_KEY_TOMB) {
			if (__atomic_compare_exchange_n(&e->key, &k, key, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				__atomic_store_n(&e->a, a, __ATOMIC_RELEASE);
				__atomic_store_n(&e->b, b, __ATOMIC_RELEASE);
				return e;
			}
		}
	}
	return NULL;
}

struct gs_xent *gs_xtab_find(int kind, uint64_t key)
{
	struct gs_xtab *t = &gs_xtabs[kind];
	if (key == GS_KEY_EMPTY || key == GS_KEY_TOMB || t->e == NULL)
		return NULL;
	uint64_t h = xtab_hash(t, key);
	for (unsigned i = 0; i < GS_XPROBE; i++) {
		struct gs_xent *e = &t->e[(h + i) & t->mask];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY)
			return NULL;
		if (k == key)
			return e;
	}
	return NULL;
}

/* 1 when this call took e (key -> tombstone), 0 when it was not key. */
int gs_xtab_take(struct gs_xent *e, uint64_t key)
{
	uint64_t k = key;
	return __atomic_compare_exchange_n(&e->key, &k, GS_KEY_TOMB, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* ---- pools ---- */

#define GS_POOL_BITS 10
#define GS_POOL_HOST_VAL (1ull << 32)

static struct gs_ent pools[1u << GS_POOL_BITS]; /* val: device + 1, or GS_POOL_HOST_VAL */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t pool_hash(uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ull) >> (64 - GS_POOL_BITS);
}

#define POOL_AT(h, i) (&pools[((h) + (i)) & ((1u << GS_POOL_BITS) - 1)])

int gs_pool_where(uint64_t pool)
{
	if (pool == GS_KEY_EMPTY || pool == GS_KEY_TOMB)
		return GS_POOL_UNKNOWN;
	uint64_t h = pool_hash(pool);
	for (unsigned i = 0; i < (1u << GS_POOL_BITS); i++) {
		struct gs_ent *e = POOL_AT(h, i);
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k == GS_KEY_EMPTY)
			break;
		if (k != pool)
			continue;
		uint64_t v = __atomic_load_n(&e->val, __ATOMIC_ACQUIRE);
		if (v == GS_POOL_HOST_VAL)
			return GS_POOL_HOST;
		if (v >= 1 && v <= GS_MAX_ORDINALS)
			return (int)(v - 1);
		break;
	}
	return GS_POOL_UNKNOWN;
}

/* pool_mu held: pool's entry, NULL when there is none */
static struct gs_ent *pool_find_locked(uint64_t pool, uint64_t h)
{
	for (unsigned i = 0; i < (1u << GS_POOL_BITS); i++) {
		struct gs_ent *e = POOL_AT(h, i);
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_RELAXED);
		if (k == GS_KEY_EMPTY)
			return NULL;
		if (k == pool)
			return e;
	}
	return NULL;
}

int gs_pool_set(uint64_t pool, int where)
{
	if (pool == GS_KEY_EMPTY || pool == GS_KEY_TOMB)
		return 0;
	if (where != GS_POOL_HOST && (where < 0 || where >= GS_MAX_ORDINALS)) {
		gs_pool_forget(pool);
		return 0;
	}
	int rv = 0;
	uint64_t v = where == GS_POOL_HOST ? GS_POOL_HOST_VAL : (uint64_t)where + 1;
	uint64_t h = pool_hash(pool);
	pthread_mutex_lock(&pool_mu);
	struct gs_ent *e = pool_find_locked(pool, h);
	if (e != NULL) {
		__atomic_store_n(&e->val, v, __ATOMIC_RELEASE);
	} else {
		rv = -1; /* full, unless a free slot turns up */
		for (unsigned i = 0; i < (1u << GS_POOL_BITS); i++) {
			e = POOL_AT(h, i);
			uint64_t k = __atomic_load_n(&e->key, __ATOMIC_RELAXED);
			if (k == GS_KEY_EMPTY || k == GS_KEY_TOMB) {
				/* the value first: a reader that sees the key sees it */
				__atomic_store_n(&e->val, v, __ATOMIC_RELEASE);
				__atomic_store_n(&e->key, pool, __ATOMIC_RELEASE);
				rv = 0;
				break;
			}
		}
	}
	pthread_mutex_unlock(&pool_mu);
	return rv;
}

void gs_pool_forget(uint64_t pool)
{
	if (pool == GS_KEY_EMPTY || pool == GS_KEY_TOMB)
		return;
	pthread_mutex_lock(&pool_mu);
	struct gs_ent *e = pool_find_locked(pool, pool_hash(pool));
	if (e != NULL)
		__atomic_store_n(&e->key, GS_KEY_TOMB, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool_mu);
}

int gs_pool_list(int dev, uint64_t *out, int max)
{
	int n = 0;
	for (unsigned i = 0; i < (1u << GS_POOL_BITS) && n < max; i++) {
		uint64_t k = __atomic_load_n(&pools[i].key, __ATOMIC_ACQUIRE);
		if (k != GS_KEY_EMPTY && k != GS_KEY_TOMB &&
		    __atomic_load_n(&pools[i].val, __ATOMIC_ACQUIRE) == (uint64_t)dev + 1)
			out[n++] = k;
	}
	return n;
}

/* After fork: the child's driver state is its own. */
static void pool_drop(void)
{
	memset(pools, 0, sizeof(pools));
	pthread_mutex_init(&pool_mu, NULL);
}
