/*
 * Attach: at the first hooked call, read GPUSLICE_SESSION; when set, ask
 * gpusliced for the session's ledger (docs/protocol.md: ATTACH ->
 * ATTACH_OK + [limits fd O_RDONLY, counters fd O_RDWR] over SCM_RIGHTS),
 * check everything, map it and publish GS_ST_ACTIVE. Every malformed,
 * short or oversized reply is an attach failure: the process then fails
 * closed (charged allocations return CUDA_ERROR_OUT_OF_MEMORY) after one
 * line on stderr, and retries at most once per second from the
 * allocation path.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gs.h"

#define GS_DEFAULT_SOCK "/run/gpuslice/ipc.sock"
#define GS_IPC_MAGIC 0x50495347u /* "GSIP" */
#define GS_IPC_VERSION 1u
#define GS_IPC_HDR 12
#define GS_IPC_MAX_PAYLOAD 4096
#define GS_IPC_ATTACH 3
#define GS_IPC_ATTACH_OK 4
#define GS_IPC_ERROR 9
#define GS_MAX_TOKEN 256
#define GS_MAX_SLOTS 65536u
#define GS_MAX_FDS 8
#define GS_ATTACH_WINDOW_NS 2000000000ll /* keep trying this long at first */
#define GS_RETRY_SLEEP_NS 50000000l
#define GS_RETRY_PERIOD_NS 1000000000ll /* later retries: at most this often */
#define GS_IO_TIMEOUT_S 1

struct gs_global gs;

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int session_cfg = -1; /* -1 unknown, 0 no session, 1 session set */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char token[GS_MAX_TOKEN + 1];
static char session_env[GS_SESSION_LEN + 64];
static int env_error; /* the environment itself is unusable (reason below) */
static char env_reason[128];
static int64_t last_try_ns;
static int atfork_done;

struct attach_err {
	char msg[256];
	int retry; /* worth trying again (daemon restarting, busy) */
};

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void fail(struct attach_err *err, int retry, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct attach_err *err, int retry, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->retry = retry;
}

/* ---- environment (read once per process, never on the hot path) ---- */

static void read_env(void)
{
	const char *s = getenv("GPUSLICE_SESSION");
	const char *d = getenv("GPUSLICE_DEBUG");
	gs_debug_on = d != NULL && d[0] != '\0' && strcmp(d, "0") != 0;
	env_error = 0;
	if (s == NULL || s[0] == '\0') {
		session_cfg = 0;
		return;
	}
	session_cfg = 1;
	snprintf(session_env, sizeof(session_env), "%s", s);
	if (strlen(s) >= GS_SESSION_LEN) {
		env_error = 1;
		snprintf(env_reason, sizeof(env_reason), "session name longer than %d bytes",
			 GS_SESSION_LEN - 1);
	}
	const char *p = getenv("GPUSLICE_IPC_SOCK");
	if (p == NULL || p[0] == '\0')
		p = GS_DEFAULT_SOCK;
	if (strlen(p) >= sizeof(sock_path)) {
		env_error = 1;
		snprintf(env_reason, sizeof(env_reason), "socket path longer than %zu bytes",
			 sizeof(sock_path) - 1);
		snprintf(sock_path, sizeof(sock_path), "%.*s", (int)sizeof(sock_path) - 1, p);
	} else {
		snprintf(sock_path, sizeof(sock_path), "%s", p);
	}
	const char *t = getenv("GPUSLICE_IPC_TOKEN");
	token[0] = '\0';
	if (t != NULL) {
		if (strlen(t) > GS_MAX_TOKEN) {
			env_error = 1;
			snprintf(env_reason, sizeof(env_reason), "GPUSLICE_IPC_TOKEN longer than %d bytes",
				 GS_MAX_TOKEN);
		} else {
			snprintf(token, sizeof(token), "%s", t);
		}
	}
}

int gs_session_configured(void)
{
	int c = __atomic_load_n(&session_cfg, __ATOMIC_ACQUIRE);
	if (c >= 0)
		return c;
	pthread_mutex_lock(&init_mu);
	if (session_cfg < 0)
		read_env();
	c = session_cfg;
	pthread_mutex_unlock(&init_mu);
	return c;
}

/* ---- IPC ---- */

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

struct fdset {
	int fd[GS_MAX_FDS];
	int n;
	int extra; /* fds beyond GS_MAX_FDS or truncated control data */
};

static void fdset_close(struct fdset *f)
{
	for (int i = 0; i < f->n; i++)
		close(f->fd[i]);
	f->n = 0;
}

static int send_all(int s, const unsigned char *p, size_t n, struct attach_err *err)
{
	while (n > 0) {
		ssize_t w = send(s, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fail(err, 1, "send: %s", w < 0 ? strerror(errno) : "short write");
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read exactly n bytes, collecting every fd passed along the way. */
static int recv_exact(int s, unsigned char *buf, size_t n, int start, struct fdset *fds,
		      struct attach_err *err)
{
	size_t got = 0;
	while (got < n) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * GS_MAX_FDS)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {.iov_base = buf + got, .iov_len = n - got};
		struct msghdr m = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.buf,
			.msg_controllen = sizeof(ctl.buf),
		};
		ssize_t r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); r >= 0 && c != NULL; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			const unsigned char *data = CMSG_DATA(c);
			for (size_t i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, data + i * sizeof(int), sizeof(int));
				if (fds->n < GS_MAX_FDS) {
					fds->fd[fds->n++] = fd;
				} else {
					close(fd);
					fds->extra = 1;
				}
			}
		}
		if (r >= 0 && (m.msg_flags & MSG_CTRUNC))
			fds->extra = 1;
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				fail(err, 1, "no reply from gpusliced within %d s", GS_IO_TIMEOUT_S);
			else
				fail(err, 1, "receive: %s", strerror(errno));
			return -1;
		}
		if (r == 0) {
			int clean = start && got == 0 && fds->n == 0;
			fail(err, clean, "connection closed by gpusliced%s",
			     clean ? "" : " in the middle of a reply");
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

static const char *code_name(uint32_t code)
{
	switch (code) {
	case 1: return "bad request";
	case 2: return "unknown session";
	case 3: return "not permitted";
	case 4: return "bad or missing token";
	case 5: return "no free slot";
	case 6: return "internal error";
	case 7: return "unsupported version";
	default: return "error";
	}
}

struct attach_reply {
	uint32_t slot;
	uint32_t ngpus;
	uint64_t generation;
	int limfd, ctrfd;
};

/* One ATTACH exchange. On success the caller owns rep->limfd/ctrfd. */
static int ipc_attach(struct attach_reply *rep, struct attach_err *err)
{
	int rv = -1;
	struct fdset fds = {.n = 0, .extra = 0};
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		fail(err, 0, "socket: %s", strerror(errno));
		return -1;
	}
	struct timeval tv = {.tv_sec = GS_IO_TIMEOUT_S, .tv_usec = 0};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fail(err, 1, "connect: %s", strerror(errno));
		goto out;
	}

	size_t slen = strlen(session_env), tlen = strlen(token);
	unsigned char req[GS_IPC_HDR + 2 + GS_SESSION_LEN + 2 + GS_MAX_TOKEN];
	size_t plen = 2 + slen + 2 + tlen;
	put32(req, GS_IPC_MAGIC);
	put16(req + 4, GS_IPC_VERSION);
	put16(req + 6, GS_IPC_ATTACH);
	put32(req + 8, (uint32_t)plen);
	put16(req + 12, (uint16_t)slen);
	memcpy(req + 14, session_env, slen);
	put16(req + 14 + slen, (uint16_t)tlen);
	memcpy(req + 16 + slen, token, tlen);
	if (send_all(s, req, GS_IPC_HDR + plen, err) < 0)
		goto out;

	unsigned char hdr[GS_IPC_HDR];
	if (recv_exact(s, hdr, sizeof(hdr), 1, &fds, err) < 0)
		goto out;
	uint32_t magic = get32(hdr), len = get32(hdr + 8);
	uint16_t ver = get16(hdr + 4), type = get16(hdr + 6);
	if (magic != GS_IPC_MAGIC) {
		fail(err, 0, "malformed reply (bad magic 0x%08x)", magic);
		goto out;
	}
	if (ver != GS_IPC_VERSION) {
		fail(err, 0, "reply has protocol version %u, want %u", ver, GS_IPC_VERSION);
		goto out;
	}
	if (len > GS_IPC_MAX_PAYLOAD) {
		fail(err, 0, "malformed reply (payload length %u > %d)", len, GS_IPC_MAX_PAYLOAD);
		goto out;
	}
	unsigned char pay[GS_IPC_MAX_PAYLOAD];
	if (len > 0 && recv_exact(s, pay, len, 0, &fds, err) < 0)
		goto out;

	if (type == GS_IPC_ERROR) {
		if (len < 6 || (size_t)get16(pay + 4) + 6 != len) {
			fail(err, 0, "malformed error reply (%u bytes)", len);
			goto out;
		}
		uint32_t code = get32(pay);
		size_t mlen = get16(pay + 4);
		char msg[160];
		if (mlen > sizeof(msg) - 1)
			mlen = sizeof(msg) - 1;
		for (size_t i = 0; i < mlen; i++) {
			unsigned char c = pay[6 + i];
			msg[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
		}
		msg[mlen] = '\0';
		fail(err, code == 5 || code == 6, "%s: %s", code_name(code), msg);
		goto out;
	}
	if (type != GS_IPC_ATTACH_OK) {
		fail(err, 0, "malformed reply (unexpected frame type %u)", type);
		goto out;
	}
	if (len != 16) {
		fail(err, 0, "malformed reply (attach_ok payload %u bytes, want 16)", len);
		goto out;
	}
	if (fds.n != 2 || fds.extra) {
		fail(err, 0, "reply carried %d file descriptors%s, want 2", fds.n,
		     fds.extra ? " (and more)" : "");
		goto out;
	}
	rep->slot = get32(pay);
	rep->ngpus = get32(pay + 4);
	rep->generation = get64(pay + 8);
	rep->limfd = fds.fd[0];
	rep->ctrfd = fds.fd[1];
	fds.n = 0;
	rv = 0;
out:
	fdset_close(&fds);
	close(s);
	return rv;
}

/* ---- ledger mapping ---- */

static int map_ledger(const struct attach_reply *rep, struct attach_err *err)
{
	struct stat st;
	void *lim = MAP_FAILED, *ctr = MAP_FAILED;
	size_t ctr_len = 0;

	if (rep->ngpus < 1 || rep->ngpus > GS_MAX_GPUS) {
		fail(err, 0, "reply names %u GPUs (want 1..%d)", rep->ngpus, GS_MAX_GPUS);
		goto bad;
	}
	if (fstat(rep->limfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != GS_LIMITS_SIZE) {
		fail(err, 0, "limits file is not a %d-byte regular file", GS_LIMITS_SIZE);
		goto bad;
	}
	lim = mmap(NULL, GS_LIMITS_SIZE, PROT_READ, MAP_SHARED, rep->limfd, 0);
	if (lim == MAP_FAILED) {
		fail(err, 0, "mmap limits: %s", strerror(errno));
		goto bad;
	}
	const struct gs_limits *l = lim;
	if (l->magic != GS_LIMITS_MAGIC || l->version != GS_LEDGER_VERSION) {
		fail(err, 0, "limits file has bad magic/version");
		goto bad;
	}
	if (l->ngpus != rep->ngpus) {
		fail(err, 0, "limits file names %u GPUs, reply %u", l->ngpus, rep->ngpus);
		goto bad;
	}
	if (strnlen(l->session, GS_SESSION_LEN) == GS_SESSION_LEN ||
	    strcmp(l->session, session_env) != 0) {
		fail(err, 0, "limits file belongs to another session");
		goto bad;
	}
	if (fstat(rep->ctrfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < GS_COUNTERS_HDR_SIZE + GS_SLOT_SIZE ||
	    st.st_size > GS_COUNTERS_HDR_SIZE + (off_t)GS_MAX_SLOTS * GS_SLOT_SIZE) {
		fail(err, 0, "counters file has a bad size");
		goto bad;
	}
	ctr_len = (size_t)st.st_size;
	ctr = mmap(NULL, ctr_len, PROT_READ | PROT_WRITE, MAP_SHARED, rep->ctrfd, 0);
	if (ctr == MAP_FAILED) {
		fail(err, 0, "mmap counters: %s", strerror(errno));
		goto bad;
	}
	struct gs_counters_hdr *c = ctr;
	if (c->magic != GS_COUNTERS_MAGIC || c->version != GS_LEDGER_VERSION || c->ngpus != l->ngpus ||
	    c->nslots < 1 || c->nslots > GS_MAX_SLOTS ||
	    (size_t)GS_COUNTERS_HDR_SIZE + (size_t)c->nslots * GS_SLOT_SIZE != ctr_len) {
		fail(err, 0, "counters file header does not match");
		goto bad;
	}
	if (rep->slot >= c->nslots) {
		fail(err, 0, "reply slot %u out of range (%u slots)", rep->slot, c->nslots);
		goto bad;
	}
	if (gs_tab_init() < 0) {
		fail(err, 0, "cannot map the allocation table: %s", strerror(errno));
		goto bad;
	}
	gs.lim = l;
	gs.ctr = c;
	gs.slot = GS_SLOT_AT(c, rep->slot);
	gs.ngpus = l->ngpus;
	gs.slot_index = rep->slot;
	gs.ctr_len = ctr_len;
	memcpy(gs.session, l->session, GS_SESSION_LEN);
	for (int i = 0; i < GS_MAX_ORDINALS; i++)
		gs.devmap[i] = GS_MAP_UNKNOWN;
	return 0;
bad:
	if (lim != MAP_FAILED)
		munmap(lim, GS_LIMITS_SIZE);
	if (ctr != MAP_FAILED)
		munmap(ctr, ctr_len);
	return -1;
}

static int attach_once(struct attach_err *err)
{
	struct attach_reply rep;
	if (env_error) {
		fail(err, 0, "%s", env_reason);
		return -1;
	}
	if (ipc_attach(&rep, err) < 0)
		return -1;
	int rv = map_ledger(&rep, err);
	close(rep.limfd);
	close(rep.ctrfd);
	return rv;
}

static void report_failure(const struct attach_err *err)
{
	gs_log("cannot attach to session '%s' at %s: %s; GPU allocations will fail", session_env,
	       sock_path, err->msg);
}

/* ---- fork ---- */

static void atfork_prepare(void) { pthread_mutex_lock(&init_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&init_mu); }

/* The child is a new process for the daemon: drop the parent's ledger view
 * and allocations; the child attaches itself at its first hooked call. */
static void atfork_child(void)
{
	pthread_mutex_init(&init_mu, NULL);
	if (gs.lim != NULL)
		munmap((void *)gs.lim, GS_LIMITS_SIZE);
	if (gs.ctr != NULL)
		munmap(gs.ctr, gs.ctr_len);
	gs.lim = NULL;
	gs.ctr = NULL;
	gs.slot = NULL;
	gs.ngpus = 0;
	gs_tab_drop();
	session_cfg = -1;
	last_try_ns = 0;
	atomic_store_explicit(&gs.state, GS_ST_UNINIT, memory_order_release);
}

/* ---- state machine ---- */

int gs_init_slow(void)
{
	pthread_mutex_lock(&init_mu);
	int s = atomic_load_explicit(&gs.state, memory_order_acquire);
	if (s != GS_ST_UNINIT)
		goto out;
	if (!atfork_done) {
		pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		atfork_done = 1;
	}
	if (session_cfg < 0)
		read_env();
	if (!session_cfg) {
		s = GS_ST_INERT;
		goto publish;
	}
	int64_t t0 = mono_ns(), deadline = t0 + GS_ATTACH_WINDOW_NS;
	struct attach_err err = {.msg = "", .retry = 0};
	int tries = 0;
	for (;;) {
		tries++;
		if (attach_once(&err) == 0) {
			s = GS_ST_ACTIVE;
			gs_debug("attached to session '%s' at %s: slot %u, %u GPU(s), %lld us, %d tr%s",
				 session_env, sock_path, gs.slot_index, gs.ngpus,
				 (long long)(mono_ns() - t0) / 1000, tries, tries == 1 ? "y" : "ies");
			break;
		}
		gs_debug("attach attempt %d failed: %s", tries, err.msg);
		if (!err.retry || mono_ns() + GS_RETRY_SLEEP_NS > deadline) {
			s = GS_ST_FAILED;
			report_failure(&err);
			break;
		}
		struct timespec ts = {.tv_sec = 0, .tv_nsec = GS_RETRY_SLEEP_NS};
		nanosleep(&ts, NULL);
	}
	last_try_ns = mono_ns();
publish:
	atomic_store_explicit(&gs.state, s, memory_order_release);
out:
	pthread_mutex_unlock(&init_mu);
	return s;
}

/* Failed closed: one more attempt, at most once per second, from the
 * allocation path (never the hot path of an attached process). */
int gs_failed_retry(void)
{
	int64_t now = mono_ns();
	if (now - __atomic_load_n(&last_try_ns, __ATOMIC_RELAXED) < GS_RETRY_PERIOD_NS)
		return GS_ST_FAILED;
	if (pthread_mutex_trylock(&init_mu) != 0)
		return atomic_load_explicit(&gs.state, memory_order_acquire);
	int s = atomic_load_explicit(&gs.state, memory_order_acquire);
	if (s == GS_ST_FAILED && now - last_try_ns >= GS_RETRY_PERIOD_NS) {
		struct attach_err err = {.msg = "", .retry = 0};
		if (attach_once(&err) == 0) {
			s = GS_ST_ACTIVE;
			gs_log("attached to session '%s' at %s after an earlier failure; GPU allocations "
			       "are admitted again",
			       session_env, sock_path);
			atomic_store_explicit(&gs.state, s, memory_order_release);
		} else {
			gs_debug("attach retry failed: %s", err.msg);
		}
		__atomic_store_n(&last_try_ns, mono_ns(), __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&init_mu);
	return s;
}
