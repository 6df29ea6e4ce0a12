/*
 * FAKECUDA_DEVICES / FAKECUDA_STATE parsing and the device UUID scheme.
 */
#include "fc_internal.h"
#include "gpu_uuid.h"
#include "size_suffix.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char devices_help[] =
	"expected a comma-separated list of device sizes such as 80GiB, 2x80GiB or 80GiB,40GiB "
	"(an optional Nx repeat count; a positive integer with unit B, KiB, MiB, GiB or TiB, "
	"K/M/G/T meaning the same; at most 16 devices)";

/* Parses "<int><unit>" (whole string); 0 or -1. */
static int parse_size(const char *s, size_t len, uint64_t *out)
{
	char buf[64];
	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	if (!isdigit((unsigned char)buf[0]))
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno || v == 0)
		return -1;
	int shift = size_suffix_shift(end);
	if (shift < 0)
		return -1;
	if (v > (UINT64_MAX >> shift) || (v << shift) > (1ULL << 50))
		return -1; /* more than 1 PiB per device is certainly a typo */
	*out = v << shift;
	return 0;
}

int fc_parse_devices(const char *s, struct fc_config *cfg)
{
	cfg->ndev = 0;
	if (s == NULL || *s == 0) {
		cfg->ndev = 1;
		cfg->capacity[0] = FC_DEFAULT_CAPACITY;
		return 0;
	}
	const char *p = s;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		/* trim blanks */
		while (len && isspace((unsigned char)*p))
			p++, len--;
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		unsigned long count = 1;
		const char *x = memchr(p, 'x', len);
		if (x == NULL)
			x = memchr(p, 'X', len);
		if (x != NULL) {
			if (x == p)
				return -1;
			for (const char *q = p; q < x; q++)
				if (!isdigit((unsigned char)*q))
					return -1;
			count = strtoul(p, NULL, 10);
			if (count == 0 || count > FC_MAX_DEVICES)
				return -1;
			len -= (size_t)(x + 1 - p);
			p = x + 1;
		}
		uint64_t size;
		if (parse_size(p, len, &size) != 0)
			return -1;
		if (cfg->ndev + count > FC_MAX_DEVICES)
			return -1;
		for (unsigned long i = 0; i < count; i++)
			cfg->capacity[cfg->ndev++] = size;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	return cfg->ndev > 0 ? 0 : -1;
}

static int valid_state_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= 100)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return 0;
	return 1;
}

static _Atomic int config_reported;

int fc_config_load(struct fc_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	const char *dev = getenv("FAKECUDA_DEVICES");
	if (fc_parse_devices(dev, cfg) != 0) {
		if (atomic_exchange(&config_reported, 1) == 0)
			fprintf(stderr, "fakecuda: invalid FAKECUDA_DEVICES=\"%s\": %s\n", dev, devices_help);
		return -1;
	}
	const char *st = getenv("FAKECUDA_STATE");
	if (st == NULL || *st == 0)
		st = "default";
	if (!valid_state_name(st) || st[0] == '.') {
		if (atomic_exchange(&config_reported, 1) == 0)
			fprintf(stderr,
				"fakecuda: invalid FAKECUDA_STATE=\"%s\": expected 1-99 characters from "
				"[A-Za-z0-9._-], not starting with '.'\n",
				st);
		return -1;
	}
	snprintf(cfg->state, sizeof(cfg->state), "%s", st);
	const char *ml = getenv("FAKECUDA_MEMORY_LIMITS");
	if (ml != NULL && *ml != 0 && strcmp(ml, "0") != 0 && strcmp(ml, "1") != 0) {
		if (atomic_exchange(&config_reported, 1) == 0)
			fprintf(stderr,
				"fakecuda: invalid FAKECUDA_MEMORY_LIMITS=\"%s\": expected 1 (the driver has NVML's "
				"memory-limit calls) or 0\n",
				ml);
		return -1;
	}
	cfg->memlimits = ml != NULL && strcmp(ml, "1") == 0;
	return 0;
}

/*
 * UUID scheme: the 16 bytes of physical device i are two rounds of the
 * splitmix64 mixer seeded with 0x66616b6563756461 ("fakecuda") + i, with the
 * RFC 4122 version (4) and variant bits set. Every process and NVML derive
 * the same UUID from the index alone, and UUIDs differ from the first hex
 * digit on, so short prefixes in CUDA_VISIBLE_DEVICES stay unambiguous.
 */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void fc_uuid_for_index(unsigned i, uint8_t bytes[16], char out[48])
{
	uint64_t seed = 0x66616b6563756461ULL + i;
	uint64_t hi = splitmix64(&seed), lo = splitmix64(&seed);
	for (int k = 0; k < 8; k++) {
		bytes[k] = (uint8_t)(hi >> (56 - 8 * k));
		bytes[8 + k] = (uint8_t)(lo >> (56 - 8 * k));
	}
	bytes[6] = (uint8_t)((bytes[6] & 0x0f) | 0x40);
	bytes[8] = (uint8_t)((bytes[8] & 0x3f) | 0x80);
	gpu_uuid_format(bytes, out, 48);
}
