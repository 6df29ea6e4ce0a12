/*
 * Ask gpusliced about a session: one STATUS request over the IPC socket
 * (docs/protocol.md). Whether it exists is the last way to tell whether a
 * job has a quota; its figures are the end-of-step lines (notice.c). Every
 * failure is "unknown" and costs at most the timeout below.
 */
#include "gs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define GS_IPC_MAGIC 0x50495347u
#define GS_IPC_VERSION 1
#define GS_IPC_STATUS 7
#define GS_IPC_STATUS_OK 8
#define GS_IPC_ERROR 9
#define GS_IPC_MAX_PAYLOAD 4096
#define GS_IPC_ERR_NOT_YOURS 8
#define GS_IPC_ERR_UNKNOWN_SESSION 2

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int io_all(int fd, void *buf, size_t n, int writing)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One STATUS exchange for session id: 1 with the session object (JSON) in
 * out (NUL-terminated, *len bytes), 0 when gpusliced has no such session
 * (for the caller), -1 when it cannot tell. */
int gs_daemon_status(const char *socket_path, const char *id, char *out, size_t cap, size_t *len)
{
	int rv = -1, fd = -1;
	struct sockaddr_un addr;
	struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
	unsigned char req[12 + 2 + 64], hdr[12], payload[GS_IPC_MAX_PAYLOAD];
	size_t idlen = strlen(id);
	uint32_t n;

	if (len)
		*len = 0;
	if (idlen == 0 || idlen > 63 || strlen(socket_path) >= sizeof(addr.sun_path))
		goto out;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, socket_path, strlen(socket_path));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		gs_debug("cannot reach gpusliced at %s: %s", socket_path, strerror(errno));
		goto out;
	}
	put32(req, GS_IPC_MAGIC);
	put16(req + 4, GS_IPC_VERSION);
	put16(req + 6, GS_IPC_STATUS);
	put32(req + 8, (uint32_t)(2 + idlen));
	put16(req + 12, (uint16_t)idlen);
	memcpy(req + 14, id, idlen);
	if (io_all(fd, req, 14 + idlen, 1) < 0 || io_all(fd, hdr, sizeof(hdr), 0) < 0)
		goto out;
	n = get32(hdr + 8);
	if (get32(hdr) != GS_IPC_MAGIC || n > GS_IPC_MAX_PAYLOAD || io_all(fd, payload, n, 0) < 0)
		goto out;
	switch (hdr[6] | hdr[7] << 8) {
	case GS_IPC_STATUS_OK:
		if (out && cap > 0) {
			size_t m = n < cap - 1 ? n : cap - 1;
			memcpy(out, payload, m);
			out[m] = '\0';
			if (len)
				*len = m;
		}
		rv = 1;
		break;
	case GS_IPC_ERROR:
		/* Asked as the job's user, a session that does not exist is
		 * "not yours" (gpusliced does not tell a user whether another
		 * user's job exists); a job's session is always its user's. */
		if (n >= 4 && (get32(payload) == GS_IPC_ERR_UNKNOWN_SESSION || get32(payload) == GS_IPC_ERR_NOT_YOURS))
			rv = 0;
		break;
	default:
		break;
	}
out:
	if (fd >= 0)
		close(fd);
	return rv;
}

int gs_daemon_has_session(const char *socket_path, const char *id)
{
	return gs_daemon_status(socket_path, id, NULL, 0, NULL);
}
