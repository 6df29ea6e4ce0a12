/*
 * The refusal line (docs/interceptor.md "When the quota refuses"): when the
 * quota refuses an allocation, one line on the process's stderr says which
 * job, which GPU, what was asked, what the job holds of its quota, the
 * quota and the --gpu-mem that set it, and where to see more. CUDA's
 * return code is unchanged; the line only adds to what the program prints.
 *
 * Written from the slow side of a refusal (credit.c, after the CAS against
 * the limit failed and every thread's credit was taken back), never from
 * the allocation fast path. The first refusal of a process gets a line,
 * later ones at most one every GS_NOTICE_GAP_NS, at most GS_NOTICE_LINES
 * in all (a child after fork counts its own). The line is built in a
 * buffer on the stack and written with one write(2): nothing here takes a
 * lock, allocates or calls stdio, so it is safe from any thread, in a
 * signal handler and in a child after fork.
 *
 * stderr is the one the process started with: its identity (device and
 * inode) is taken when the library loads, and the line is written only
 * while descriptor 2 is still that file. A process that closed its stderr
 * (and may have opened something else under number 2) or pointed it
 * elsewhere gets no line; a pipe or socket nobody reads any more costs no
 * SIGPIPE, and one that is full is skipped rather than waited on.
 *
 * Off: GPUSLICE_NOTICE=off (or 0, no, none; "summary" keeps only the
 * end-of-step lines), set by the job's user or, cluster-wide, by the SPANK
 * plugin's notice= argument. GPUSLICE_GPU_MEM is the --gpu-mem the job
 * asked for, as written (the plugin passes it; "default" for the
 * cluster's default quota).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs.h"

#define GS_NOTICE_LINES 5
#define GS_NOTICE_GAP_NS (5ll * 1000 * 1000 * 1000)
#define GS_NOTICE_ASKED_LEN 24

static struct {
	int on;      /* the line is wanted */
	int have_fd; /* descriptor 2 was open at load */
	dev_t dev;   /* and was this file */
	ino_t ino;
	char asked[GS_NOTICE_ASKED_LEN]; /* GPUSLICE_GPU_MEM, printable characters only */
} nt;

static int64_t last_ns; /* when the last line was written (0: never) */
static int lines;       /* lines this process wrote */

/* 1 when the value of GPUSLICE_NOTICE turns the refusal line off. */
static int notice_off(const char *v)
{
	static const char *const off[] = {"0", "off", "no", "none", "false", "summary"};
	if (v == NULL)
		return 0;
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
		if (strcasecmp(v, off[i]) == 0)
			return 1;
	return 0;
}

__attribute__((constructor)) static void notice_init(void)
{
	struct stat st;
	nt.on = !notice_off(getenv("GPUSLICE_NOTICE"));
	nt.have_fd = fstat(STDERR_FILENO, &st) == 0;
	if (nt.have_fd) {
		nt.dev = st.st_dev;
		nt.ino = st.st_ino;
	}
	const char *a = getenv("GPUSLICE_GPU_MEM");
	size_t n = 0;
	for (; a != NULL && a[n] != '\0' && n + 1 < sizeof(nt.asked); n++) {
		char c = a[n];
		int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.';
		nt.asked[n] = ok ? c : '?';
	}
	nt.asked[n] = '\0';
}

/* A child after fork: a process of its own, with its own lines. */
void gs_notice_fork(void)
{
	__atomic_store_n(&last_ns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&lines, 0, __ATOMIC_RELAXED);
}

/* ---- the line, without stdio ---- */

struct line {
	char b[512];
	size_t n;
};

static void put(struct line *l, const char *s)
{
	while (*s != '\0' && l->n < sizeof(l->b) - 1)
		l->b[l->n++] = *s++;
}

static void put_u64(struct line *l, uint64_t v)
{
	char d[24];
	int i = sizeof(d) - 1;
	d[i] = '\0';
	do {
		d[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	put(l, d + i);
}

/* As the rest of gpuslice writes sizes: "8GiB", "7.5GiB", "512MiB", "100B". */
static void put_size(struct line *l, uint64_t b)
{
	static const struct {
		const char *name;
		uint64_t v;
	} u[] = {{"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		if (b < u[i].v)
			continue;
		uint64_t whole = b / u[i].v, rem = b % u[i].v;
		put_u64(l, whole + (rem != 0 && (rem * 10 + u[i].v / 2) / u[i].v == 10));
		if (rem != 0) {
			uint64_t tenth = (rem * 10 + u[i].v / 2) / u[i].v;
			put(l, ".");
			put_u64(l, tenth == 10 ? 0 : tenth);
		}
		put(l, u[i].name);
		return;
	}
	put_u64(l, b);
	put(l, "B");
}

/* "job 42" for a Slurm job's session (a number, or an array job's
 * NUMBER_TASK), else "session NAME". */
static void put_session(struct line *l)
{
	char s[GS_SESSION_LEN];
	memcpy(s, gs.session, sizeof(s));
	s[sizeof(s) - 1] = '\0';
	int job = s[0] >= '0' && s[0] <= '9';
	for (const char *p = s; *p != '\0'; p++)
		if (!((*p >= '0' && *p <= '9') || *p == '_'))
			job = 0;
	put(l, job ? "job " : "session ");
	put(l, s);
}

/* The device ordinal this process knows ledger GPU g by, -1 when none was
 * looked up. */
static int ordinal_of(int g)
{
	for (int i = 0; i < GS_MAX_ORDINALS; i++)
		if (__atomic_load_n(&gs.devmap[i], __ATOMIC_RELAXED) == g)
			return i;
	return -1;
}

static void format(struct line *l, int g, uint64_t n, int claim, int last)
{
	uint64_t limit = __atomic_load_n(&gs.lim->gpu[g].limit, __ATOMIC_RELAXED);
	uint64_t physical = __atomic_load_n(&gs.lim->gpu[g].physical, __ATOMIC_RELAXED);
	uint64_t held = gs_real_used(g);
	int dev = ordinal_of(g);
	put(l, "gpuslice: ");
	put_session(l);
	put(l, claim ? ": an allocation of " : ": a CUDA context of ");
	put_size(l, n);
	put(l, " on GPU ");
	if (dev >= 0) {
		put_u64(l, (uint64_t)dev);
	} else {
		char u[GS_UUID_LEN];
		memcpy(u, gs.lim->gpu[g].uuid, sizeof(u));
		u[sizeof(u) - 1] = '\0';
		put(l, u);
	}
	put(l, " was refused: the job holds ");
	put_size(l, held);
	put(l, " of its ");
	put_size(l, limit);
	put(l, " quota on that GPU (");
	if (nt.asked[0] != '\0' && strcmp(nt.asked, "default") == 0) {
		put(l, "the cluster's default; ask with --gpu-mem");
	} else if (nt.asked[0] != '\0') {
		put(l, "--gpu-mem=");
		put(l, nt.asked);
	}
	if (physical > limit) {
		put(l, nt.asked[0] != '\0' ? "; the GPU itself has " : "the GPU itself has ");
		put_size(l, physical);
	}
	if (l->b[l->n - 1] == '(')
		l->n -= 2; /* nothing to say in parentheses */
	else
		put(l, ")");
	put(l, ". CUDA reports out of memory. More: gpuslice status ");
	char s[GS_SESSION_LEN];
	memcpy(s, gs.session, sizeof(s));
	s[sizeof(s) - 1] = '\0';
	put(l, s);
	if (last)
		put(l, " (no more of these lines from this process)");
	l->b[l->n++] = '\n';
}

/* Write the line to stderr, all of it or nothing, without SIGPIPE and
 * without waiting on a full pipe. */
static void emit(const struct line *l, mode_t mode)
{
	struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
	if ((S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode)) &&
	    (poll(&p, 1, 0) != 1 || (p.revents & (POLLOUT | POLLERR | POLLHUP)) != POLLOUT))
		return;
	if (S_ISSOCK(mode)) {
		while (send(STDERR_FILENO, l->b, l->n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR)
			;
		return;
	}
	sigset_t pipe, old, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	int blocked = sigprocmask(SIG_BLOCK, &pipe, &old) == 0;
	int was_pending = blocked && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
	ssize_t w;
	while ((w = write(STDERR_FILENO, l->b, l->n)) < 0 && errno == EINTR)
		;
	if (w < 0 && errno == EPIPE && blocked && !was_pending) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	if (blocked)
		sigprocmask(SIG_SETMASK, &old, NULL);
}

/* The quota refused n bytes on ledger GPU g (claim: an allocation; 0: a
 * context's cost). */
void gs_notice_refused(int g, uint64_t n, int claim)
{
	if (!nt.on || !nt.have_fd || gs.lim == NULL || g < 0 || (uint32_t)g >= gs.ngpus)
		return;
	if (__atomic_load_n(&lines, __ATOMIC_RELAXED) >= GS_NOTICE_LINES ||
	    !gs_take_turn(&last_ns, gs_mono_ns(), GS_NOTICE_GAP_NS))
		return;
	int k = __atomic_add_fetch(&lines, 1, __ATOMIC_RELAXED);
	if (k > GS_NOTICE_LINES)
		return;
	int saved = errno;
	struct stat st;
	if (fstat(STDERR_FILENO, &st) == 0 && st.st_dev == nt.dev && st.st_ino == nt.ino) {
		struct line l = {.n = 0};
		format(&l, g, n, claim, k == GS_NOTICE_LINES);
		emit(&l, st.st_mode);
	}
	errno = saved;
}
