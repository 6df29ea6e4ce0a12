/*
 * Reservations near the limit wait for the driver's figure. The driver
 * holds memory for a process that no allocation entry point shows: the
 * modules a framework's kernels load lazily, library handles, NCCL's
 * structures (100-180 MiB for PyTorch on an H100). gpusliced charges it to
 * the process's slot at each audit pass (docs/ledger.md "Driver memory").
 * A job filling its quota faster than the passes come would otherwise
 * reach the limit by its charges with the driver's figure above it, and
 * the audit would stop it. So a reservation that would leave less than
 * an eighth of the limit (at most GS_SETTLE_MARGIN_MAX) asks for a pass
 * (SHORT) and waits for the GPU's settled count to show the end of a
 * pass begun after the ask (the one running may have read before it), at
 * most GS_SETTLE_WAIT_NS, at most every GS_SETTLE_GAP_NS per process and
 * GPU (a job living near its limit stalls at most one pass, ~10-25 ms, a
 * second); never while no pass has read the session yet (the audit may
 * be off), and only every GS_SETTLE_BACKOFF_NS after a wait that no pass
 * ended. Far from the limit, or past it, nothing is done: a load and two
 * compares. A context's cost is not settled for (credit.c): the driver
 * holds the context before it is charged, and a pass would count it
 * uncharged.
 */
#include <time.h>

#include "gs.h"

#define GS_SETTLE_MARGIN_MAX (256ull << 20)
#define GS_SETTLE_GAP_NS (1000ll * 1000 * 1000)
#define GS_SETTLE_WAIT_NS (200ll * 1000 * 1000)
/* after a wait no pass ended: the audit is slow or off; ask less often */
#define GS_SETTLE_BACKOFF_NS (10ll * 1000 * 1000 * 1000)

static int64_t last[GS_MAX_GPUS];

void gs_settle(int g, uint64_t n)
{
	if (gs.lim == NULL || gs.ctr == NULL || g < 0 || (uint32_t)g >= gs.ngpus)
		return;
	struct gs_counter_gpu *c = &gs.ctr->gpu[g];
	uint64_t limit = __atomic_load_n(&gs.lim->gpu[g].limit, __ATOMIC_RELAXED);
	uint64_t margin = limit / 8 < GS_SETTLE_MARGIN_MAX ? limit / 8 : GS_SETTLE_MARGIN_MAX;
	uint64_t used = __atomic_load_n(&c->used, __ATOMIC_RELAXED);
	if (n > limit || used > limit - n)
		return; /* it does not fit anyway */
	if (margin <= limit - n && used <= limit - n - margin)
		return; /* far from the limit */
	int64_t t0 = gs_mono_ns();
	if (!gs_take_turn(&last[g], t0, GS_SETTLE_GAP_NS))
		return;
	/* gpusliced counts each pass twice, at its start and its end: odd
	 * while one runs. Wanted: the end of a pass begun after the ask. */
	uint64_t s0 = __atomic_load_n(&c->settled, __ATOMIC_ACQUIRE);
	if (gs_short_send(g) != 0 || s0 == 0)
		return; /* no pass has read this session yet (the audit may be off): never wait for one */
	uint64_t want = s0 + 2 + (s0 & 1);
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 1000 * 1000};
	while (gs_mono_ns() - t0 < GS_SETTLE_WAIT_NS) {
		if (__atomic_load_n(&c->settled, __ATOMIC_ACQUIRE) - want < (1ull << 63)) {
			gs_debug("settled on GPU %d in %lld us: driver memory %llu bytes", g,
				 (long long)(gs_mono_ns() - t0) / 1000,
				 (unsigned long long)__atomic_load_n(&c->driver, __ATOMIC_RELAXED));
			return;
		}
		nanosleep(&nap, NULL);
	}
	gs_debug("no audit pass on GPU %d within %lld ms; reserving without it", g,
		 (long long)GS_SETTLE_WAIT_NS / 1000000);
	__atomic_store_n(&last[g], gs_mono_ns() + GS_SETTLE_BACKOFF_NS - GS_SETTLE_GAP_NS, __ATOMIC_RELAXED);
}
