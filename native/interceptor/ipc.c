/*
 * The attach client's side of the wire (docs/protocol.md): one ATTACH
 * request, one reply read exactly as long as its header says (never past
 * it), every descriptor passed along the way collected and closed unless
 * the reply is a well-formed ATTACH_OK with exactly two. Reads and writes
 * time out after GS_IO_TIMEOUT_S.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs.h"
#include "ipc.h"

#define GS_IPC_MAGIC 0x50495347u /* "GSIP" */
#define GS_IPC_VERSION 1u
#define GS_IPC_HDR 12
#define GS_IPC_MAX_PAYLOAD 4096
#define GS_IPC_ATTACH 3
#define GS_IPC_ATTACH_OK 4
#define GS_IPC_SHORT 12
#define GS_IPC_ERROR 9
#define GS_MAX_FDS 8
#define GS_IO_TIMEOUT_S 1

void gs_attach_fail(struct gs_attach_err *err, int retry, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->retry = retry;
}

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
/* A frame's header: magic, version, type, payload length. */
static void put_hdr(unsigned char *p, uint16_t type, uint32_t plen)
{
	put32(p, GS_IPC_MAGIC);
	put16(p + 4, GS_IPC_VERSION);
	put16(p + 6, type);
	put32(p + 8, plen);
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

static int send_all(int s, const unsigned char *p, size_t n, struct gs_attach_err *err)
{
	while (n > 0) {
		ssize_t w = send(s, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			gs_attach_fail(err, 1, "send: %s", w < 0 ? strerror(errno) : "short write");
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read exactly n bytes, collecting every fd passed along the way. */
static int recv_exact(int s, unsigned char *buf, size_t n, int start, struct fdset *fds,
		      struct gs_attach_err *err)
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
				gs_attach_fail(err, 1, "no reply from gpusliced within %d s", GS_IO_TIMEOUT_S);
			else
				gs_attach_fail(err, 1, "receive: %s", strerror(errno));
			return -1;
		}
		if (r == 0) {
			int clean = start && got == 0 && fds->n == 0;
			gs_attach_fail(err, clean, "connection closed by gpusliced%s",
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
	case 8: return "no session";
	default: return "error";
	}
}


/* Connects and sends one ATTACH request: the connected socket, or -1.
 * With nonblock, neither the connect nor the send waits (a full listen
 * backlog is a failure); the socket returned blocks again. */
int gs_ipc_attach_send(const char *sock_path, const char *session, const char *token, uint32_t flags,
		       int nonblock, struct gs_attach_err *err)
{
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	err->code = 0;
	err->conn_errno = 0;
	if (s < 0) {
		gs_attach_fail(err, 0, "socket: %s", strerror(errno));
		return -1;
	}
	struct timeval tv = {.tv_sec = GS_IO_TIMEOUT_S, .tv_usec = 0};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		err->conn_errno = errno;
		gs_attach_fail(err, 1, "connect: %s", strerror(errno));
		close(s);
		return -1;
	}

	size_t slen = strlen(session), tlen = strlen(token);
	unsigned char req[GS_IPC_HDR + 2 + GS_SESSION_LEN + 2 + GS_MAX_TOKEN + 4];
	size_t plen = 2 + slen + 2 + tlen + (flags ? 4 : 0);
	put_hdr(req, GS_IPC_ATTACH, (uint32_t)plen);
	put16(req + 12, (uint16_t)slen);
	memcpy(req + 14, session, slen);
	put16(req + 14 + slen, (uint16_t)tlen);
	memcpy(req + 16 + slen, token, tlen);
	if (flags)
		put32(req + 16 + slen + tlen, flags);
	if (send_all(s, req, GS_IPC_HDR + plen, err) < 0 ||
	    (nonblock && fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) < 0)) {
		close(s);
		return -1;
	}
	/* Nothing more is sent: gpusliced closes its end once it has answered,
	 * so the connection counts against the uid's limit for one round trip
	 * however long the answer waits here to be read (an early ATTACH's
	 * waits until the process's first hooked call). */
	shutdown(s, SHUT_WR);
	return s;
}

/* Reads the reply to the ATTACH sent on s, and closes s. On success the
 * caller owns rep->limfd/ctrfd. */
int gs_ipc_attach_recv(int s, struct gs_attach_reply *rep, struct gs_attach_err *err)
{
	int rv = -1;
	struct fdset fds = {.n = 0, .extra = 0};
	unsigned char hdr[GS_IPC_HDR];
	if (recv_exact(s, hdr, sizeof(hdr), 1, &fds, err) < 0)
		goto out;
	uint32_t magic = get32(hdr), len = get32(hdr + 8);
	uint16_t ver = get16(hdr + 4), type = get16(hdr + 6);
	if (magic != GS_IPC_MAGIC) {
		gs_attach_fail(err, 0, "malformed reply (bad magic 0x%08x)", magic);
		goto out;
	}
	if (ver != GS_IPC_VERSION) {
		gs_attach_fail(err, 0, "reply has protocol version %u, want %u", ver, GS_IPC_VERSION);
		goto out;
	}
	if (len > GS_IPC_MAX_PAYLOAD) {
		gs_attach_fail(err, 0, "malformed reply (payload length %u > %d)", len, GS_IPC_MAX_PAYLOAD);
		goto out;
	}
	unsigned char pay[GS_IPC_MAX_PAYLOAD];
	if (len > 0 && recv_exact(s, pay, len, 0, &fds, err) < 0)
		goto out;

	if (type == GS_IPC_ERROR) {
		if (len < 6 || (size_t)get16(pay + 4) + 6 != len) {
			gs_attach_fail(err, 0, "malformed error reply (%u bytes)", len);
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
		err->code = (int)code;
		gs_attach_fail(err, code == 5 || code == 6, "%s: %s", code_name(code), msg);
		goto out;
	}
	if (type != GS_IPC_ATTACH_OK) {
		gs_attach_fail(err, 0, "malformed reply (unexpected frame type %u)", type);
		goto out;
	}
	/* 16 bytes; 32 with the compute page (an ATTACH with GS_ATTACH_COMPUTE),
	 * whose fd comes third when the session has a slot on it */
	if (len != 16 && len != 32) {
		gs_attach_fail(err, 0, "malformed reply (attach_ok payload %u bytes, want 16 or 32)", len);
		goto out;
	}
	uint32_t cslot = len == 32 ? get32(pay + 16) : GS_NO_COMPUTE_SLOT;
	int want = cslot == GS_NO_COMPUTE_SLOT ? 2 : 3;
	if (len == 32 && get32(pay + 20) != 0) {
		gs_attach_fail(err, 0, "malformed reply (attach_ok reserved word)");
		goto out;
	}
	if (fds.n != want || fds.extra) {
		gs_attach_fail(err, 0, "reply carried %d file descriptors%s, want %d", fds.n,
		     fds.extra ? " (and more)" : "", want);
		goto out;
	}
	rep->slot = get32(pay);
	rep->ngpus = get32(pay + 4);
	rep->generation = get64(pay + 8);
	rep->limfd = fds.fd[0];
	rep->ctrfd = fds.fd[1];
	rep->cslot = cslot;
	rep->cgen = len == 32 ? get64(pay + 24) : 0;
	rep->cfd = want == 3 ? fds.fd[2] : -1;
	fds.n = 0;
	rv = 0;
out:
	fdset_close(&fds);
	close(s);
	return rv;
}

/* Sends one SHORT (audit now: the driver refused an allocation the quota
 * allowed, or a reservation near the limit waits for the driver's figure,
 * on the GPU with that UUID) and closes: gpusliced answers OK, which
 * nobody waits for. Neither the connect nor the send waits. 0 when sent,
 * -1 when not (the audit's next pass comes anyway). */
int gs_ipc_short(const char *sock_path, const char *uuid)
{
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -1;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t plen = strlen(sock_path), ulen = strnlen(uuid, GS_UUID_LEN);
	if (plen >= sizeof(a.sun_path) || ulen == 0) {
		close(s);
		return -1;
	}
	memcpy(a.sun_path, sock_path, plen + 1);
	int rv = -1;
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
		unsigned char req[GS_IPC_HDR + 2 + GS_UUID_LEN];
		put_hdr(req, GS_IPC_SHORT, (uint32_t)(2 + ulen));
		put16(req + 12, (uint16_t)ulen);
		memcpy(req + 14, uuid, ulen);
		ssize_t n = send(s, req, GS_IPC_HDR + 2 + ulen, MSG_NOSIGNAL | MSG_DONTWAIT);
		rv = n == (ssize_t)(GS_IPC_HDR + 2 + ulen) ? 0 : -1;
	}
	close(s);
	return rv;
}
