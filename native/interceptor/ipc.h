/* The IPC attach client (ipc.c). */
#ifndef GPUSLICE_IPC_H
#define GPUSLICE_IPC_H

#include <stdint.h>

#define GS_MAX_TOKEN 256

struct gs_attach_err {
	char msg[256];
	int retry; /* worth trying again (daemon restarting, busy) */
	int code;  /* the daemon's error code (0: none, e.g. no answer) */
	int conn_errno; /* connect(2) failed with this (0: connected) */
};

/* Error code: the process belongs to no session (docs/protocol.md). */
#define GS_IPC_CODE_NO_SESSION 9

/* ATTACH flag: hand over the compute page with ATTACH_OK (docs/protocol.md). */
#define GS_ATTACH_COMPUTE 1u
/* ATTACH_OK's compute slot when the session has none. */
#define GS_NO_COMPUTE_SLOT 0xFFFFFFFFu
/* Error code: bad request (an older gpusliced refuses the ATTACH flags). */
#define GS_IPC_CODE_BAD_REQUEST 1

struct gs_attach_reply {
	uint32_t slot;
	uint32_t ngpus;
	uint64_t generation;
	int limfd, ctrfd;
	int cfd;        /* the compute page (read-only), or -1 */
	uint32_t cslot; /* the session's slot on it, or GS_NO_COMPUTE_SLOT */
	uint64_t cgen;  /* that slot's generation */
};

void gs_attach_fail(struct gs_attach_err *err, int retry, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* One ATTACH exchange in two halves, so that the process can work while
 * gpusliced answers: send returns the connected socket (or -1), recv reads
 * the reply and closes it; on success the caller owns rep->limfd/ctrfd. */
int gs_ipc_attach_send(const char *sock_path, const char *session, const char *token, uint32_t flags,
		       int nonblock, struct gs_attach_err *err);
/* On success the caller owns rep->limfd, ctrfd and cfd (when not -1). */
int gs_ipc_attach_recv(int s, struct gs_attach_reply *rep, struct gs_attach_err *err);
/* One SHORT message (docs/protocol.md): fire and forget. */
int gs_ipc_short(const char *sock_path, const char *uuid);

#endif
