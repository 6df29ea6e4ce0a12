/*
 * Per-process allocation tables: device pointer / VMM handle / array handle
 * -> (bytes, ledger GPU). Lock-free open addressing in MAP_NORESERVE memory
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
 */
#include <sys/mman.h>

#include "gs.h"

static const unsigned gs_tab_bits[GS_NTAB] = {
	[GS_TAB_PTR] = 20,
	[GS_TAB_VMM] = 16,
	[GS_TAB_ARRAY] = 16,
	[GS_TAB_MIPMAP] = 14,
};

struct gs_tab gs_tabs[GS_NTAB];
static void *tab_mem;
static size_t tab_len;

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
	tab_mem = m;
	tab_len = len;
	return 0;
}

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
