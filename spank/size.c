#include "size.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
	const char *name;
	uint64_t mult;
} units[] = {
	{"", 1ULL << 20}, /* Slurm: the default unit is megabytes */
	{"b", 1},
	{"k", 1ULL << 10}, {"kb", 1ULL << 10}, {"kib", 1ULL << 10},
	{"m", 1ULL << 20}, {"mb", 1ULL << 20}, {"mib", 1ULL << 20},
	{"g", 1ULL << 30}, {"gb", 1ULL << 30}, {"gib", 1ULL << 30},
	{"t", 1ULL << 40}, {"tb", 1ULL << 40}, {"tib", 1ULL << 40},
};

int gs_parse_size(const char *s, uint64_t *bytes)
{
	const char *p, *end;
	uint64_t n = 0, mult = 0;
	size_t i, ulen;

	if (!s || !bytes)
		return -1;
	for (p = s; *p && isspace((unsigned char)*p); p++)
		;
	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (n > (UINT64_MAX - d) / 10)
			return -1;
		n = n * 10 + d;
	}
	/* unit: p .. last non-blank */
	for (; *p && isspace((unsigned char)*p); p++)
		;
	end = p + strlen(p);
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	ulen = (size_t)(end - p);
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strlen(units[i].name) == ulen && strncasecmp(units[i].name, p, ulen) == 0) {
			mult = units[i].mult;
			break;
		}
	}
	if (mult == 0)
		return -1;
	if (n != 0 && n > UINT64_MAX / mult)
		return -1;
	*bytes = n * mult;
	return 0;
}

void gs_format_size(uint64_t b, char *buf, size_t len)
{
	static const struct {
		const char *name;
		uint64_t v;
	} u[] = {{"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}};
	size_t i;

	for (i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		if (b >= u[i].v) {
			if (b % u[i].v == 0)
				snprintf(buf, len, "%llu%s", (unsigned long long)(b / u[i].v), u[i].name);
			else
				snprintf(buf, len, "%.1f%s", (double)b / (double)u[i].v, u[i].name);
			return;
		}
	}
	snprintf(buf, len, "%lluB", (unsigned long long)b);
}
