/*
 * gs_ledger_write: tries, as whatever user runs it, to raise a session's
 * limit: attaches over IPC itself (docs/protocol.md), then attempts to make
 * the limits mapping writable and to get a writable view of the limits
 * file by any route it can think of; also tries to open ledger files by
 * path. Prints one key=value line per attempt ("ok" or the errno name).
 *
 *   gs_ledger_write SOCKET SESSION [PATH...]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpuslice_ledger.h"

static const char *res(int rc) { return rc == 0 ? "ok" : strerrorname_np(errno); }

static void put(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gs_ledger_write SOCKET SESSION [PATH...]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 3; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		printf("open path=%s result=%s\n", argv[i], res(fd >= 0 ? 0 : -1));
		if (fd >= 0)
			close(fd);
	}
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[1]);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		printf("attach result=%s\n", strerrorname_np(errno));
		return 1;
	}
	size_t sl = strlen(argv[2]);
	unsigned char req[12 + 2 + 64 + 2];
	if (sl > 63)
		sl = 63;
	put(req, 0x50495347u, 4);
	put(req + 4, 1, 2);
	put(req + 6, 3, 2);
	put(req + 8, 2 + sl + 2, 4);
	put(req + 12, sl, 2);
	memcpy(req + 14, argv[2], sl);
	put(req + 14 + sl, 0, 2);
	if (write(s, req, 16 + sl) != (ssize_t)(16 + sl)) {
		printf("attach result=write\n");
		return 1;
	}
	unsigned char buf[12 + 4096];
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = 12 + 16};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
	ssize_t r = recvmsg(s, &m, 0);
	int fds[4], nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); r > 0 && c != NULL; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < k && nfds < 4; i++)
				memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
		}
	}
	unsigned type = r >= 12 ? (unsigned)(buf[6] | buf[7] << 8) : 0;
	printf("attach result=%s type=%u fds=%d\n", type == 4 && nfds == 2 ? "ok" : "refused", type, nfds);
	if (type != 4 || nfds != 2)
		return 1;
	int lim = fds[0], ctr = fds[1];
	int fl = fcntl(lim, F_GETFL);
	printf("limits_mode %s\n", (fl & O_ACCMODE) == O_RDONLY ? "rdonly" : "writable");

	void *p = mmap(NULL, GS_LIMITS_SIZE, PROT_READ, MAP_SHARED, lim, 0);
	if (p == MAP_FAILED) {
		printf("map result=%s\n", strerrorname_np(errno));
		return 1;
	}
	const struct gs_limits *l = p;
	printf("limit before=%llu\n", (unsigned long long)l->gpu[0].limit);
	printf("mprotect result=%s\n", res(mprotect(p, GS_LIMITS_SIZE, PROT_READ | PROT_WRITE)));
	void *w = mmap(NULL, GS_LIMITS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, lim, 0);
	printf("mmap_write result=%s\n", res(w == MAP_FAILED ? -1 : 0));
	if (w != MAP_FAILED)
		munmap(w, GS_LIMITS_SIZE);
	uint64_t big = UINT64_MAX / 2;
	printf("pwrite result=%s\n",
	       res(pwrite(lim, &big, sizeof(big), 128 + 48) == (ssize_t)sizeof(big) ? 0 : -1));
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", lim);
	int re = open(path, O_RDWR);
	printf("reopen result=%s\n", res(re >= 0 ? 0 : -1));
	if (re >= 0)
		close(re);
	printf("limit after=%llu\n", (unsigned long long)l->gpu[0].limit);
	close(ctr);
	close(lim);
	return 0;
}
