/*
 * What the fakecuda test programs share: one event=check line per
 * property, then the event=summary line.
 */
#ifndef FC_CHECK_H
#define FC_CHECK_H

#include <stdio.h>

#include "cuda.h"

static int checks, failed;

static inline void check(const char *name, int ok)
{
	checks++;
	failed += !ok;
	printf("event=check name=%s status=%s\n", name, ok ? "ok" : "failed");
}

/* Prints event=summary; the exit status: 1 when a check failed. */
static inline int summary(void)
{
	printf("event=summary checks=%d failed=%d\n", checks, failed);
	return failed != 0;
}

/* The current device's free memory, as cuMemGetInfo says. */
static inline size_t free_now(void)
{
	size_t f = 0, t = 0;
	cuMemGetInfo(&f, &t);
	return f;
}

#endif
