/*
 * fc_thread_init: CUDA is initialised and memory allocated on a thread
 * that then exits; the process lives on, holding the memory.
 *
 *   fc_thread_init SIZE
 *
 *   event=alloc bytes=... result=0 pid=...   (after the thread has exited)
 *
 * Then it waits for SIGTERM / SIGKILL. fakecuda takes the process's slot on
 * that thread (its liveness lock): the slot must stay the live process's.
 */
#include <pthread.h>
#include <unistd.h>

#include "common.h"
#include "drvctx.h"

static uint64_t size;
static CUresult result;

static void *worker(void *arg)
{
	(void)arg;
	CUcontext c;
	CUdeviceptr p = 0;
	if (ex_driver_setup(0, &c) != 0) {
		result = CUDA_ERROR_UNKNOWN;
		return NULL;
	}
	result = cuMemAlloc(&p, size);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || ex_parse_size(argv[1], &size))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0)
		return 1;
	printf("event=alloc bytes=%llu result=%d pid=%d\n", (unsigned long long)size, (int)result, (int)getpid());
	for (;;)
		pause();
}
