/*
 * The launch gate's slow side: the compute page (native/include/
 * gpuslice_compute.h) and waiting while gpusliced throttles the session.
 *
 * gpusliced decides from what the driver measures (NVML's per-process
 * utilisation, docs/daemon.md "Compute share"); the page only carries its
 * decision, read-only to jobs. A throttled launch sleeps in 200 us steps
 * until its bit clears, the session's slot is given to another session,
 * or the page's heartbeat stops (gpusliced gone: never hold a job).
 */
#include "gate.h"
#include "gpuslice_compute.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const uint64_t zero_word;
const uint64_t *gs_gate_word GS_LOCAL = &zero_word;
static const struct gs_compute_hdr *page;
static const struct gs_compute_sess *mine;
static uint64_t my_gen;

void gs_gate_attach(const char *sock_path)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + sizeof("/compute")];
	const char *slash = strrchr(sock_path, '/');
	size_t dir = slash ? (size_t)(slash - sock_path) : 0;
	if (dir + sizeof("/compute") > sizeof(path))
		return;
	memcpy(path, sock_path, dir);
	memcpy(path + dir, "/compute", sizeof("/compute"));
	if (page == NULL) {
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return; /* no compute page: launches are never gated */
		struct stat st;
		void *m = MAP_FAILED;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)GS_COMPUTE_SIZE)
			m = mmap(NULL, GS_COMPUTE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (m == MAP_FAILED)
			return;
		const struct gs_compute_hdr *h = m;
		if (h->magic != GS_COMPUTE_MAGIC || h->version != GS_COMPUTE_VERSION ||
		    h->nsessions != GS_COMPUTE_SESSIONS) {
			munmap(m, GS_COMPUTE_SIZE);
			return;
		}
		page = h;
	}
	const struct gs_compute_sess *s = (const void *)(page + 1);
	for (unsigned i = 0; i < GS_COMPUTE_SESSIONS; i++) {
		uint64_t gen = __atomic_load_n(&s[i].gen, __ATOMIC_ACQUIRE);
		if (gen == 0 || strncmp(s[i].name, gs.session, GS_COMPUTE_NAME) != 0)
			continue;
		mine = &s[i];
		my_gen = gen;
		__atomic_store_n(&gs_gate_word, &s[i].throttle, __ATOMIC_RELEASE);
		gs_debug("compute share: session '%s' has slot %u on %s", gs.session, i, path);
		return;
	}
	__atomic_store_n(&gs_gate_word, &zero_word, __ATOMIC_RELEASE); /* no share: never gated */
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
