/*
 * Helpers shared by the example programs: option parsing, sizes, clocks,
 * the event=alloc report.
 * Every example prints machine-parseable lines of space-separated key=value
 * pairs, the first being event=<what> (see README.md).
 */
#ifndef GPUSLICE_EXAMPLES_COMMON_H
#define GPUSLICE_EXAMPLES_COMMON_H

#include <errno.h>
#include <signal.h>
#include <sys/select.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "size_suffix.h"

/* "64MiB", "1G", "4096", "2x" is not a size; K/M/G/T and KiB.. are powers of 1024. */
static inline int ex_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	int shift = size_suffix_shift(end);
	if (shift < 0 || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static inline int ex_parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static inline uint64_t ex_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile sig_atomic_t ex_hold_interrupted;

static inline void ex_on_usr1(int sig)
{
	(void)sig;
	ex_hold_interrupted = 1;
}

/* SIGUSR1 ends a hold early; installed before main so it is never missed. */
__attribute__((constructor)) static void ex_install_usr1(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ex_on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
}

/* Sleeps for s seconds, or until SIGUSR1 (the program then goes on).
 * SIGUSR1 is blocked except inside pselect, so a signal is never lost
 * between the check and the sleep, and a holding process does not wake up
 * until its time is up (4,096 holders polling would load the machine). */
static inline void ex_sleep_s(double s)
{
	if (s <= 0)
		return;
	uint64_t end = ex_now_ns() + (uint64_t)(s * 1e9);
	sigset_t usr1, orig;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &orig);
	sigdelset(&orig, SIGUSR1);
	for (;;) {
		uint64_t now = ex_now_ns();
		if (ex_hold_interrupted || now >= end)
			break;
		uint64_t left = end - now;
		struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u), .tv_nsec = (long)(left % 1000000000u)};
		pselect(0, NULL, NULL, NULL, &ts, &orig);
	}
	sigprocmask(SIG_UNBLOCK, &usr1, NULL);
}

/* Reports a usage error and exits 2. */
#define EX_USAGE(prog, usage, ...)                                              \
	do {                                                                    \
		fprintf(stderr, "%s: ", prog);                                  \
		fprintf(stderr, __VA_ARGS__);                                   \
		fprintf(stderr, "\nusage: %s %s\n", prog, usage);              \
		exit(2);                                                        \
	} while (0)

/* Matches "--name" (value in the next argv) or "--name=value". */
static inline const char *ex_opt(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);
	if (strncmp(argv[*i], name, n) != 0)
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n] == 0 && *i + 1 < argc)
		return argv[++*i];
	return NULL;
}

/*
 * Table-driven command lines. Each program lists its options; ex_parse_args
 * walks argv, stores each value, and on anything it cannot take prints
 * "<prog>: bad --name VALUE[ (hint)]" or "<prog>: unknown argument ARG" with
 * the usage line and exits 2.
 */
enum ex_kind {
	EX_SIZE,     /* uint64_t: a size (ex_parse_size), at least min */
	EX_LONG,     /* long: an integer in [min, max] */
	EX_SECONDS,  /* double: seconds, 0 or more */
	EX_FRACTION, /* double: 0 < F <= 1 */
	EX_API,      /* int: 1 for "driver", 0 for "runtime" */
	EX_FLAG,     /* int: set to 1 by the bare option (no value) */
};

struct ex_option {
	const char *name; /* "--step" */
	enum ex_kind kind;
	void *value;      /* where the value goes, typed as the kind says */
	long min, max;    /* EX_LONG range; EX_SIZE minimum */
	const char *hint; /* added to the error message, or NULL */
};

/* Stores the value v of option o; -1 when v is not acceptable. */
static inline int ex_take(const struct ex_option *o, const char *v)
{
	char *end;
	double d;
	switch (o->kind) {
	case EX_SIZE:
		if (ex_parse_size(v, (uint64_t *)o->value) != 0 || *(uint64_t *)o->value < (uint64_t)o->min)
			return -1;
		return 0;
	case EX_LONG:
		return ex_parse_long(v, o->min, o->max, (long *)o->value);
	case EX_SECONDS:
	case EX_FRACTION:
		d = strtod(v, &end);
		if (*end || d < 0 || (o->kind == EX_FRACTION && (d <= 0 || d > 1)))
			return -1;
		*(double *)o->value = d;
		return 0;
	case EX_API:
		if (strcmp(v, "driver") == 0)
			*(int *)o->value = 1;
		else if (strcmp(v, "runtime") == 0)
			*(int *)o->value = 0;
		else
			return -1;
		return 0;
	case EX_FLAG:
		break;
	}
	return -1;
}

static inline void ex_parse_args(int argc, char **argv, const char *usage, const struct ex_option *opts, size_t nopts)
{
	for (int i = 1; i < argc; i++) {
		const struct ex_option *o = NULL;
		const char *v = NULL;
		for (size_t k = 0; k < nopts && o == NULL; k++) {
			if (opts[k].kind == EX_FLAG) {
				if (strcmp(argv[i], opts[k].name) == 0) {
					*(int *)opts[k].value = 1;
					o = &opts[k];
				}
			} else if ((v = ex_opt(argc, argv, &i, opts[k].name)) != NULL) {
				o = &opts[k];
				if (ex_take(o, v) != 0)
					EX_USAGE(argv[0], usage, "bad %s %s%s%s%s", o->name, v, o->hint ? " (" : "",
						 o->hint ? o->hint : "", o->hint ? ")" : "");
			}
		}
		if (o == NULL)
			EX_USAGE(argv[0], usage, "unknown argument %s", argv[i]);
	}
}

/* --device N, the option every program has. */
#define EX_DEVICE_OPTION(var) {"--device", EX_LONG, &(var), 0, 1024, NULL}

#define EX_STR_(x) #x
#define EX_STR(x) EX_STR_(x) /* a number macro as a string literal */

#define EX_PARSE_ARGS(argc, argv, usage, opts) ex_parse_args(argc, argv, usage, opts, sizeof(opts) / sizeof(opts[0]))

/*
 * The outcome of one allocation call, as an event=alloc line (README.md),
 * counted in *t: rc 0 is allowed, EX_OOM denied, anything else an error.
 * api (the "api=" key) and ptr (the "ptr=" key of an allowed one) are left
 * out when NULL. Returns the status.
 */
#define EX_OOM 2 /* CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation */

enum ex_status { EX_ALLOWED, EX_DENIED, EX_ERROR };

struct ex_tally {
	long allowed, denied;
	int unexpected; /* an allocation failed with something else than out-of-memory */
};

static inline enum ex_status ex_report_alloc(struct ex_tally *t, const char *api, long index, uint64_t bytes, int rc,
					     const char *err, const void *ptr)
{
	enum ex_status st = rc == 0 ? EX_ALLOWED : rc == EX_OOM ? EX_DENIED : EX_ERROR;
	if (st == EX_ALLOWED)
		t->allowed++;
	else if (st == EX_DENIED)
		t->denied++;
	else
		t->unexpected = 1;
	static const char *const names[] = {"allowed", "denied", "error"};
	printf("event=alloc%s%s index=%ld bytes=%llu status=%s", api ? " api=" : "", api ? api : "", index,
	       (unsigned long long)bytes, names[st]);
	if (st == EX_ALLOWED && ptr != NULL)
		printf(" ptr=%p", ptr);
	else if (st != EX_ALLOWED)
		printf(" error=%s", err);
	putchar('\n');
	return st;
}

/* The event=meminfo line. */
static inline void ex_print_meminfo(const char *when, size_t free_b, size_t total)
{
	printf("event=meminfo when=%s free=%zu total=%zu\n", when, free_b, total);
}

static inline int ex_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#endif
