/* The IPC attach client (ipc.c). */
#ifndef GPUSLICE_IPC_H
#define GPUSLICE_IPC_H

#include <stdint.h>

#define GS_MAX_TOKEN 256

struct gs_attach_err {
	char msg[256];
	int retry; /* worth trying again (daemon restarting, busy) */
};

struct gs_attach_reply {
	uint32_t slot;
	uint32_t ngpus;
	uint64_t generation;
	int limfd, ctrfd;
};

void gs_attach_fail(struct gs_attach_err *err, int retry, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int gs_ipc_attach(const char *sock_path, const char *session, const char *token,
		  struct gs_attach_reply *rep, struct gs_attach_err *err);

#endif
