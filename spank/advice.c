/*
 * What to ask next time, from what a job used (docs/user-guide.md):
 * the same rule as internal/advice (Go: gpuslice seff), checked against it
 * by spank/spanktest.
 *
 * The ask is the peak plus a margin (an eighth of it, at least 256 MiB),
 * rounded up as people write sizes: to 128 MiB up to 1 GiB, to 512 MiB up
 * to 16 GiB, to whole GiB above. A peak well below the quota is one whose
 * ask is at most three quarters of the quota; a job at its quota (a peak
 * within 5 % of it) or refused an allocation is told to ask for more: the
 * quota plus a quarter (at least 512 MiB), rounded the same way, since
 * what it would have taken is not known.
 */
#include "advice.h"

#include <stdio.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static uint64_t round_up(uint64_t b, uint64_t unit)
{
	if (b > UINT64_MAX - unit)
		return UINT64_MAX / unit * unit;
	return (b + unit - 1) / unit * unit;
}

/* Rounded up as people write sizes. */
static uint64_t nice(uint64_t b)
{
	if (b <= GiB)
		return round_up(b, 128 * MiB);
	if (b <= 16 * GiB)
		return round_up(b, 512 * MiB);
	return round_up(b, GiB);
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

enum gs_advice gs_advise(uint64_t peak, uint64_t quota, uint64_t refused, uint64_t *ask)
{
	*ask = 0;
	if (quota == 0)
		return GS_ADVICE_NONE;
	if (refused > 0 || peak >= quota - quota / 20) {
		*ask = nice(add_sat(quota, max_u64(quota / 4, 512 * MiB)));
		return GS_ADVICE_MORE;
	}
	uint64_t want = nice(add_sat(peak, max_u64(peak / 8, 256 * MiB)));
	if (want <= quota / 4 * 3) {
		*ask = want;
		return GS_ADVICE_LOWER;
	}
	return GS_ADVICE_NONE;
}

void gs_format_ask(uint64_t b, char *buf, size_t len)
{
	if (b % GiB == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(b / GiB));
	else
		snprintf(buf, len, "%lluM", (unsigned long long)((b + MiB - 1) / MiB));
}
