/*
 * The launch gate's slow side: the compute page (native/include/
 * gpuslice_compute.h) and waiting while gpusliced throttles the session.
 *
 * gpusliced decides from what the driver measures (NVML's per-process
 * utilisation, docs/compute-share.md); the page only carries its
 * decision, read-only to jobs, and is handed over at ATTACH with the
 * session's slot: a job never finds it through a path its environment
 * names. A throttled launch sleeps in 200 us steps
 * until its bit clears, the session's slot is given to another session,
 * or the page's heartbeat stops (gpusliced gone: never hold a job).
 */
#include "gate.h"
#include "gpuslice_compute.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

static const uint64_t zero_word;
const uint64_t *gs_gate_word GS_LOCAL = &zero_word;
static const struct gs_compute_hdr *page;
static dev_t page_dev;
static ino_t page_ino;
static const struct gs_compute_sess *mine;
static uint64_t my_gen;

void gs_gate_attach(int fd, uint32_t slot, uint64_t gen)
{
	struct stat st;
	if (fd < 0 || slot >= GS_COMPUTE_SESSIONS || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)GS_COMPUTE_SIZE) {
		mine = NULL;
		__atomic_store_n(&gs_gate_word, &zero_word, __ATOMIC_RELEASE); /* no share: never gated */
		return;
	}
	if (page == NULL || st.st_dev != page_dev || st.st_ino != page_ino) {
		/* A page mapped before (a gpusliced that made a new one since) stays
		 * mapped: other threads may be reading it. */
		void *m = mmap(NULL, GS_COMPUTE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			return;
		const struct gs_compute_hdr *h = m;
		if (h->magic != GS_COMPUTE_MAGIC || h->version != GS_COMPUTE_VERSION ||
		    h->nsessions != GS_COMPUTE_SESSIONS) {
			munmap(m, GS_COMPUTE_SIZE);
			return;
		}
		page = h;
		page_dev = st.st_dev;
		page_ino = st.st_ino;
	}
	const struct gs_compute_sess *s = (const void *)(page + 1);
	mine = &s[slot];
	my_gen = gen; /* a slot given to another session since has another generation */
	__atomic_store_n(&gs_gate_word, &s[slot].throttle, __ATOMIC_RELEASE);
	gs_debug("compute share: session '%s' has slot %u on the compute page", gs.session, slot);
}

/* The page's heartbeat as last seen changing, process-wide: a daemon that
 * stopped is noticed once, not again at every launch. Races between
 * threads only move these forward. */
static uint64_t beat_last;
static int64_t beat_changed;

/* Whether gpusliced has beaten within GS_COMPUTE_STALE_NS. */
static int page_fresh(int64_t now)
{
	uint64_t b = __atomic_load_n(&page->heartbeat, __ATOMIC_ACQUIRE);
	if (b != __atomic_load_n(&beat_last, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&beat_changed, __ATOMIC_RELAXED) == 0) {
		__atomic_store_n(&beat_last, b, __ATOMIC_RELAXED);
		__atomic_store_n(&beat_changed, now, __ATOMIC_RELAXED);
		return 1;
	}
	return now - __atomic_load_n(&beat_changed, __ATOMIC_RELAXED) <= GS_COMPUTE_STALE_NS;
}

void gs_gate_wait(void)
{
	if (mine == NULL)
		return;
	CUdevice dev = 0;
	gs_pfn_cuCtxGetDevice getdev = GS_REAL(cuCtxGetDevice);
	if (getdev == NULL || getdev(&dev) != CUDA_SUCCESS)
		return;
	int g = gs_dev_to_gpu(dev);
	if (g < 0 || g >= 64)
		return; /* a GPU outside the session's ledger: not gpuslice's to share */
	for (;;) {
		if (__atomic_load_n(&mine->gen, __ATOMIC_ACQUIRE) != my_gen) {
			__atomic_store_n(&gs_gate_word, &zero_word, __ATOMIC_RELEASE); /* the session is gone */
			return;
		}
		if (!(__atomic_load_n(&mine->throttle, __ATOMIC_ACQUIRE) & (1ULL << g)))
			return;
		if (!page_fresh(gs_mono_ns()))
			return; /* gpusliced stopped deciding: launch */
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
	}
}
