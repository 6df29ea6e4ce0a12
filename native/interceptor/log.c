/* Diagnostics on stderr: one write(2) per line, never on the hot path. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "gs.h"

int gs_debug_on;
int gs_plain_path;

void gs_log(const char *fmt, ...)
{
	char buf[512];
	int saved = errno;
	int n = snprintf(buf, sizeof(buf), "gpuslice: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	buf[len++] = '\n';
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(STDERR_FILENO, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		len -= (size_t)w;
	}
	errno = saved;
}
