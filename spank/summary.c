/*
 * The lines at the end of a step (notice.c writes them): from gpusliced's
 * session object (STATUS, JSON), per GPU of the node the job's peak, its
 * quota and the allocations refused, and, when the peak is well below the
 * quota or at it, what to ask next time (advice.c). The JSON is
 * gpusliced's own; only what these lines need is read from it.
 */
#include "summary.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "advice.h"
#include "size.h"

/* ---- a reader for the few fields needed ---- */

static const char *ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* p at '"': just past the closing quote, or NULL. */
static const char *string_end(const char *p, const char *e)
{
	for (p++; p < e; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* Just past the value at p, or NULL. */
static const char *value_end(const char *p, const char *e)
{
	int depth = 0;

	p = ws(p, e);
	if (p >= e)
		return NULL;
	if (*p == '"')
		return string_end(p, e);
	if (*p != '{' && *p != '[') {
		while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n')
			p++;
		return p;
	}
	for (; p < e; p++) {
		if (*p == '"') {
			p = string_end(p, e);
			if (!p)
				return NULL;
			p--;
		} else if (*p == '{' || *p == '[') {
			depth++;
		} else if ((*p == '}' || *p == ']') && --depth == 0) {
			return p + 1;
		}
	}
	return NULL;
}

/* Calls fn for each member of the object at p (key without quotes, value
 * start); the end of the object, or NULL when it is not one. */
static const char *members(const char *p, const char *e, void (*fn)(void *, const char *, size_t, const char *, const char *),
			   void *arg)
{
	p = ws(p, e);
	if (p >= e || *p != '{')
		return NULL;
	p = ws(p + 1, e);
	if (p < e && *p == '}')
		return p + 1;
	while (p < e) {
		const char *k, *ke, *v;
		if (*p != '"' || !(ke = string_end(p, e)))
			return NULL;
		k = p + 1;
		p = ws(ke, e);
		if (p >= e || *p != ':')
			return NULL;
		v = ws(p + 1, e);
		if (!(p = value_end(v, e)))
			return NULL;
		fn(arg, k, (size_t)(ke - 1 - k), v, p);
		p = ws(p, e);
		if (p < e && *p == ',')
			p = ws(p + 1, e);
		else if (p < e && *p == '}')
			return p + 1;
		else
			return NULL;
	}
	return NULL;
}

static int key_is(const char *k, size_t n, const char *name) { return strlen(name) == n && memcmp(k, name, n) == 0; }

static uint64_t number(const char *v, const char *ve)
{
	uint64_t n = 0;

	for (; v < ve && *v >= '0' && *v <= '9'; v++)
		n = n > (UINT64_MAX - 9) / 10 ? UINT64_MAX : n * 10 + (uint64_t)(*v - '0');
	return n;
}

struct gpu {
	uint64_t index, limit, peak, denied;
};

struct session {
	struct gpu gpu[GS_SUMMARY_MAX_GPUS];
	int n;
	int bad;
};

static void gpu_member(void *arg, const char *k, size_t n, const char *v, const char *ve)
{
	struct gpu *g = arg;

	if (key_is(k, n, "index"))
		g->index = number(v, ve);
	else if (key_is(k, n, "limit_bytes"))
		g->limit = number(v, ve);
	else if (key_is(k, n, "peak_bytes"))
		g->peak = number(v, ve);
	else if (key_is(k, n, "denied"))
		g->denied = number(v, ve);
}

static void session_member(void *arg, const char *k, size_t n, const char *v, const char *ve)
{
	struct session *s = arg;

	if (!key_is(k, n, "gpus"))
		return;
	if (*v != '[') {
		s->bad = 1;
		return;
	}
	v = ws(v + 1, ve);
	while (v < ve && *v == '{' && s->n < GS_SUMMARY_MAX_GPUS) {
		struct gpu *g = &s->gpu[s->n];
		memset(g, 0, sizeof(*g));
		if (!(v = members(v, ve, gpu_member, g))) {
			s->bad = 1;
			return;
		}
		s->n++;
		v = ws(v, ve);
		if (v < ve && *v == ',')
			v = ws(v + 1, ve);
	}
}

/* ---- the lines ---- */

struct out {
	char *b;
	size_t cap, n;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int m;

	if (o->n + 1 >= o->cap)
		return;
	va_start(ap, fmt);
	m = vsnprintf(o->b + o->n, o->cap - o->n, fmt, ap);
	va_end(ap);
	if (m > 0)
		o->n = o->n + (size_t)m < o->cap ? o->n + (size_t)m : o->cap - 1;
}

static unsigned percent(uint64_t part, uint64_t whole)
{
	if (whole == 0)
		return 0;
	if (part > UINT64_MAX / 100)
		return (unsigned)(part / (whole / 100 ? whole / 100 : 1));
	return (unsigned)((part * 100 + whole / 2) / whole);
}

size_t gs_summary_format(const char *json, size_t len, const char *job, const char *step, const char *node,
			 char *buf, size_t cap)
{
	struct session s;
	struct out o = {buf, cap, 0};
	uint64_t peak = 0, quota = 0, refused = 0, ask;
	char a[32], b[32], c[32];
	int i;

	if (cap == 0)
		return 0;
	buf[0] = '\0';
	memset(&s, 0, sizeof(s));
	if (!members(json, json + len, session_member, &s) || s.bad || s.n == 0)
		return 0;
	put(&o, "gpuslice: job %s (%s on %s): GPU memory peak ", job, step, node);
	for (i = 0; i < s.n; i++) {
		struct gpu *g = &s.gpu[i];
		gs_format_size(g->peak, a, sizeof(a));
		gs_format_size(g->limit, b, sizeof(b));
		put(&o, "%s%s of %s%s%s (%u%%)", i ? ", " : "", a, i ? "" : "its ", b, i ? "" : " quota",
		    percent(g->peak, g->limit));
		if (s.n > 1)
			put(&o, " on GPU %llu", (unsigned long long)g->index);
		if (g->peak > peak)
			peak = g->peak;
		if (g->limit > quota)
			quota = g->limit;
		refused += g->denied;
	}
	if (refused == 0)
		put(&o, "%sno allocation refused\n", s.n > 1 ? "; " : ", ");
	else
		put(&o, "%s%llu allocation%s refused\n", s.n > 1 ? "; " : ", ", (unsigned long long)refused,
		    refused == 1 ? "" : "s");
	switch (gs_advise(peak, quota, refused, &ask)) {
	case GS_ADVICE_LOWER:
		gs_format_ask(ask, c, sizeof(c));
		put(&o, "gpuslice: job %s used well below its quota: next time --gpu-mem=%s would do (its peak plus a margin)\n",
		    job, c);
		break;
	case GS_ADVICE_MORE:
		gs_format_ask(ask, c, sizeof(c));
		put(&o, "gpuslice: job %s reached its quota: next time ask for more, e.g. --gpu-mem=%s\n", job, c);
		break;
	default:
		break;
	}
	if (o.n > 0 && buf[o.n - 1] != '\n')
		buf[o.n - 1] = '\n'; /* cut short: still whole lines */
	return o.n;
}
