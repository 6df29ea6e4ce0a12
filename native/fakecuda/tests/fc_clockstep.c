/*
 * fc_clockstep: steps the wall clock this node's fakecuda stamps NVML's
 * utilisation samples with, as an NTP step or `date -s` steps a node's
 * clock (NVIDIA's driver stamps them with the host's wall clock). The
 * node is the fakecuda state of FAKECUDA_STATE (and FAKECUDA_STATE_DIR);
 * the step holds until stepped again, for every process of the node.
 *
 *   fc_clockstep SECONDS    steps it by SECONDS (negative: back; decimals
 *                           allowed); prints event=clockstep step_ns=<this
 *                           step> total_ns=<all steps so far>
 *
 * The kernel's clock is not touched: one kernel serves every node of the
 * tests, and gpusliced (Go) reads it without the C library.
 */
#include "common.h"
#include "nvml.h"
#include "../timeline.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	char *end;
	double secs = argc == 2 ? strtod(argv[1], &end) : 0;
	if (argc != 2 || *end != '\0' || secs == 0 || secs < -1e7 || secs > 1e7) {
		fprintf(stderr, "usage: fc_clockstep SECONDS (non-zero, negative to step back)\n");
		return 2;
	}
	/* NVML's utilisation query makes the node's timeline if no launch has */
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	nvmlReturn_t (*init)(void) = h ? (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2") : NULL;
	nvmlReturn_t (*get)(unsigned, nvmlDevice_t *) =
		h ? (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
	nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *) =
		h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(h, "nvmlDeviceGetUtilizationRates") : NULL;
	nvmlDevice_t d;
	nvmlUtilization_t u;
	if (!init || !get || !util || init() != NVML_SUCCESS || get(0, &d) != NVML_SUCCESS ||
	    util(d, &u) != NVML_SUCCESS) {
		fprintf(stderr, "fc_clockstep: fakecuda's NVML does not answer for GPU 0\n");
		return 1;
	}
	const char *dir = getenv("FAKECUDA_STATE_DIR");
	const char *state = getenv("FAKECUDA_STATE");
	char path[512];
	snprintf(path, sizeof(path), "%s/fakecuda-%s@timeline", dir && *dir ? dir : "/dev/shm",
		 state && *state ? state : "default");
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < FC_TL_CLOCK_STEP_OFF + 8) {
		fprintf(stderr, "fc_clockstep: %s: no timeline there\n", path);
		return 1;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		perror("fc_clockstep: mmap");
		return 1;
	}
	_Atomic int64_t *step = (_Atomic int64_t *)((char *)m + FC_TL_CLOCK_STEP_OFF);
	int64_t ns = (int64_t)(secs * 1e9);
	int64_t total = atomic_fetch_add(step, ns) + ns;
	printf("event=clockstep step_ns=%lld total_ns=%lld\n", (long long)ns, (long long)total);
	return 0;
}
