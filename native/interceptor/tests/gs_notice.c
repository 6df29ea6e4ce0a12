/*
 * gs_notice: refusals in the situations the refusal line must survive
 * (tests/interceptor/notice_test.go). One key=value line per step on
 * stdout; the interceptor's lines go to stderr.
 *
 *   gs_notice STEP...
 *
 *   alloc:S          cuMemAlloc_v2 of S on device 0 (kept when it succeeds)
 *   threads:N:S      N threads at once, each a cuMemAlloc_v2 of S (kept)
 *   fork:S           fork; the child allocates S and exits; the parent waits
 *   signal:S         a SIGUSR1 handler allocates S (raised here)
 *   closeerr         close(2)
 *   reuseerr:PATH    close(2), then open PATH for writing: it takes number 2
 *   dup2err:PATH     open PATH and dup2 it onto 2 (stderr pointed elsewhere)
 *   freeall          free every allocation kept
 *
 * Sizes take K/M/G suffixes (powers of 1024).
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda.h"

static CUcontext ctx;
static CUdeviceptr kept[4096];
static int nkept;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	switch (*end) {
	case 'K': case 'k': return v << 10;
	case 'M': case 'm': return v << 20;
	case 'G': case 'g': return v << 30;
	default: return v;
	}
}

static CUresult alloc(size_t n)
{
	CUdeviceptr p = 0;
	CUresult r = cuMemAlloc_v2(&p, n);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&mu);
		if (nkept < (int)(sizeof(kept) / sizeof(kept[0])))
			kept[nkept++] = p;
		pthread_mutex_unlock(&mu);
	}
	return r;
}

struct thr {
	pthread_t t;
	size_t n;
	CUresult r;
};

static pthread_barrier_t barrier;

static void *thread_main(void *arg)
{
	struct thr *th = arg;
	cuCtxSetCurrent(ctx);
	pthread_barrier_wait(&barrier);
	th->r = alloc(th->n);
	return NULL;
}

static size_t signal_bytes;
static volatile CUresult signal_rc = (CUresult)-1;

static void on_usr1(int sig)
{
	(void)sig;
	CUdeviceptr p = 0;
	signal_rc = cuMemAlloc_v2(&p, signal_bytes);
}

static void step(const char *arg)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", arg);
	char *colon = strchr(buf, ':');
	char *val = colon != NULL ? colon + 1 : "";
	if (colon != NULL)
		*colon = '\0';
	if (strcmp(buf, "alloc") == 0) {
		size_t n = parse_size(val);
		printf("alloc rc=%d bytes=%zu\n", (int)alloc(n), n);
	} else if (strcmp(buf, "threads") == 0) {
		char *sz = strchr(val, ':');
		int n = atoi(val);
		if (sz == NULL || n < 1 || n > 256) {
			printf("error bad-threads=%s\n", arg);
			return;
		}
		struct thr th[256];
		pthread_barrier_init(&barrier, NULL, (unsigned)n);
		for (int i = 0; i < n; i++) {
			th[i].n = parse_size(sz + 1);
			pthread_create(&th[i].t, NULL, thread_main, &th[i]);
		}
		int refused = 0, ok = 0;
		for (int i = 0; i < n; i++) {
			pthread_join(th[i].t, NULL);
			if (th[i].r == CUDA_ERROR_OUT_OF_MEMORY)
				refused++;
			else if (th[i].r == CUDA_SUCCESS)
				ok++;
		}
		pthread_barrier_destroy(&barrier);
		printf("threads n=%d ok=%d refused=%d\n", n, ok, refused);
	} else if (strcmp(buf, "fork") == 0) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			CUresult r = alloc(parse_size(val));
			printf("child pid=%d rc=%d\n", (int)getpid(), (int)r);
			fflush(stdout);
			_exit(0);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		printf("forked exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	} else if (strcmp(buf, "signal") == 0) {
		signal_bytes = parse_size(val);
		signal(SIGUSR1, on_usr1);
		raise(SIGUSR1);
		printf("signal rc=%d\n", (int)signal_rc);
	} else if (strcmp(buf, "closeerr") == 0) {
		printf("closeerr rc=%d\n", close(2));
	} else if (strcmp(buf, "reuseerr") == 0) {
		close(2);
		int fd = open(val, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		printf("reuseerr fd=%d\n", fd);
	} else if (strcmp(buf, "dup2err") == 0) {
		int fd = open(val, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int r = fd >= 0 ? dup2(fd, 2) : -1;
		if (fd > 2)
			close(fd);
		printf("dup2err rc=%d\n", r);
	} else if (strcmp(buf, "freeall") == 0) {
		int n = 0;
		for (int i = 0; i < nkept; i++)
			n += cuMemFree_v2(kept[i]) == CUDA_SUCCESS;
		nkept = 0;
		printf("freeall n=%d\n", n);
	} else {
		printf("error unknown-step=%s\n", arg);
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_DFL); /* a write to a pipe nobody reads kills, as for most programs */
	CUdevice dev;
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGet(&dev, 0);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r == CUDA_SUCCESS)
		r = cuCtxSetCurrent(ctx);
	printf("init rc=%d\n", (int)r);
	for (int i = 1; i < argc; i++)
		step(argv[i]);
	printf("done\n");
	return 0;
}
