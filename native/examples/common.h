/*
 * Helpers shared by the example programs: option parsing, sizes, clocks.
 * Every example prints machine-parseable lines of space-separated key=value
 * pairs, the first being event=<what> (see README.md).
 */
#ifndef GPUSLICE_EXAMPLES_COMMON_H
#define GPUSLICE_EXAMPLES_COMMON_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* "64MiB", "1G", "4096", "2x" is not a size; K/M/G/T and KiB.. are powers of 1024. */
static inline int ex_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	unsigned shift = 0;
	if (*end == 0 || strcasecmp(end, "B") == 0)
		shift = 0;
	else if (strcasecmp(end, "K") == 0 || strcasecmp(end, "KiB") == 0)
		shift = 10;
	else if (strcasecmp(end, "M") == 0 || strcasecmp(end, "MiB") == 0)
		shift = 20;
	else if (strcasecmp(end, "G") == 0 || strcasecmp(end, "GiB") == 0)
		shift = 30;
	else if (strcasecmp(end, "T") == 0 || strcasecmp(end, "TiB") == 0)
		shift = 40;
	else
		return -1;
	if (v > (UINT64_MAX >> shift))
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

/* Sleeps for s seconds, or until SIGUSR1 (the program then goes on). */
static inline void ex_sleep_s(double s)
{
	if (s <= 0)
		return;
	uint64_t end = ex_now_ns() + (uint64_t)(s * 1e9);
	while (!ex_hold_interrupted && ex_now_ns() < end) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
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

static inline int ex_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#endif
