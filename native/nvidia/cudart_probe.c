/*
 * cudart_probe: a program built with gcc against NVIDIA's own CUDA 11.8
 * headers and linked to NVIDIA's libcudart.so.11.0, as a user's program
 * would be. It exercises what gpuslice cares about and prints one
 * `key=value` line per fact, for tests to read:
 *
 *   cudart_probe SIZE
 *
 * device query (cudaGetDeviceProperties, cudaMemGetInfo), copies and memsets
 * through device memory, then for every allocation kind (cudaMalloc,
 * cudaMallocPitch, cudaMallocManaged, cudaMallocAsync on a stream with
 * events, cudaMallocArray) two allocations of SIZE bytes each, reporting
 * each call's cudaError_t and what cudaMemGetInfo says while the first is
 * held, and cudaDeviceReset. Under a quota between SIZE and 2*SIZE the second
 * allocation of every kind must be refused. At the end it lists the CUDA
 * libraries mapped into the process (/proc/self/maps), so a test can check
 * which libcuda the runtime loaded.
 *
 * Exit status: 0 when it ran to the end (refusals are reported, not fatal),
 * 1 when a call that must work failed (the line says which), 2 on bad usage.
 */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void report(const char *what, cudaError_t rc)
{
	printf("%s=%d\n", what, (int)rc);
	if (rc != cudaSuccess)
		printf("%s_error=%s\n", what, cudaGetErrorName(rc));
}

/* A call that must work: report it, and remember when it did not. */
static int must(const char *what, cudaError_t rc)
{
	report(what, rc);
	if (rc != cudaSuccess) {
		failed = 1;
		return -1;
	}
	return 0;
}

static void meminfo(const char *when)
{
	size_t freeb = 0, total = 0;
	cudaError_t rc = cudaMemGetInfo(&freeb, &total);
	if (rc != cudaSuccess) {
		must("meminfo", rc);
		return;
	}
	printf("meminfo_%s_free=%zu\nmeminfo_%s_total=%zu\n", when, freeb, when, total);
}

static void query(void)
{
	int rtv = 0, drv = 0, n = 0;
	must("runtime_version_rc", cudaRuntimeGetVersion(&rtv));
	must("driver_version_rc", cudaDriverGetVersion(&drv));
	must("device_count_rc", cudaGetDeviceCount(&n));
	printf("runtime_version=%d\ndriver_version=%d\ndevice_count=%d\n", rtv, drv, n);
	struct cudaDeviceProp p;
	memset(&p, 0, sizeof(p));
	if (must("properties", cudaGetDeviceProperties(&p, 0)) == 0)
		printf("prop_name=%s\nprop_total=%zu\nprop_cc=%d.%d\nprop_sms=%d\n", p.name, p.totalGlobalMem, p.major,
		       p.minor, p.multiProcessorCount);
	int pools = -1;
	if (must("attr_pools", cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0)) == 0)
		printf("attr_pools_supported=%d\n", pools);
	meminfo("start");
}

/* Bytes survive a round trip through device memory. */
static void copies(void)
{
	enum { N = 1 << 20 };
	unsigned char *host = malloc(N), *back = malloc(N);
	void *a = NULL, *b = NULL;
	if (host == NULL || back == NULL) {
		printf("copy=host-oom\n");
		failed = 1;
		goto out;
	}
	if (must("copy_malloc_a", cudaMalloc(&a, N)) || must("copy_malloc_b", cudaMalloc(&b, N)))
		goto out;
	if (must("memset", cudaMemset(a, 0x5a, N)) || must("memcpy_dtoh", cudaMemcpy(back, a, N, cudaMemcpyDeviceToHost)))
		goto out;
	int ok = 1;
	for (int i = 0; i < N; i++)
		ok &= back[i] == 0x5a;
	for (int i = 0; i < N; i++)
		host[i] = (unsigned char)(i * 7 + 3);
	if (must("memcpy_htod", cudaMemcpy(a, host, N, cudaMemcpyHostToDevice)) ||
	    must("memcpy_dtod", cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice)) ||
	    must("memcpy_dtoh2", cudaMemcpy(back, b, N, cudaMemcpyDeviceToHost)))
		goto out;
	ok &= memcmp(host, back, N) == 0;
	printf("copy=%s\n", ok ? "ok" : "mismatch");
	if (!ok)
		failed = 1;
out:
	if (a)
		must("copy_free_a", cudaFree(a));
	if (b)
		must("copy_free_b", cudaFree(b));
	free(host);
	free(back);
}

/* ---- one allocation kind: allocate twice, query while the first is held, free ---- */
struct kind {
	const char *name;
	cudaError_t (*alloc)(void **p, size_t size, void *arg);
	cudaError_t (*release)(void *p, void *arg);
};

static cudaError_t k_malloc(void **p, size_t size, void *arg)
{
	(void)arg;
	return cudaMalloc(p, size);
}

static cudaError_t k_free(void *p, void *arg)
{
	(void)arg;
	return cudaFree(p);
}

/* A pitched allocation of SIZE bytes: rows of 64 KiB (a multiple of any pitch alignment). */
#define ROW (64u << 10)
static cudaError_t k_pitch(void **p, size_t size, void *arg)
{
	size_t pitch = 0;
	cudaError_t rc = cudaMallocPitch(p, &pitch, ROW, size / ROW);
	if (rc == cudaSuccess && pitch != ROW)
		printf("pitch_unexpected=%zu\n", pitch);
	(void)arg;
	return rc;
}

static cudaError_t k_managed(void **p, size_t size, void *arg)
{
	(void)arg;
	return cudaMallocManaged(p, size, cudaMemAttachGlobal);
}

static cudaError_t k_async(void **p, size_t size, void *arg)
{
	return cudaMallocAsync(p, size, (cudaStream_t)arg);
}

static cudaError_t k_async_free(void *p, void *arg)
{
	cudaError_t rc = cudaFreeAsync(p, (cudaStream_t)arg);
	if (rc != cudaSuccess)
		return rc;
	return cudaStreamSynchronize((cudaStream_t)arg);
}

/* A 2D float array of SIZE bytes: rows of 4096 floats. */
static cudaError_t k_array(void **p, size_t size, void *arg)
{
	struct cudaChannelFormatDesc desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
	(void)arg;
	return cudaMallocArray((cudaArray_t *)p, &desc, 4096, size / (4096 * sizeof(float)), 0);
}

static cudaError_t k_array_free(void *p, void *arg)
{
	(void)arg;
	return cudaFreeArray((cudaArray_t)p);
}

static void run_kind(const struct kind *k, size_t size, void *arg)
{
	char key[64];
	void *first = NULL, *second = NULL;
	snprintf(key, sizeof(key), "%s_first", k->name);
	cudaError_t rc1 = k->alloc(&first, size, arg);
	report(key, rc1);
	if (rc1 != cudaSuccess)
		first = NULL;
	snprintf(key, sizeof(key), "%s_held", k->name);
	meminfo(key);
	snprintf(key, sizeof(key), "%s_second", k->name);
	cudaError_t rc2 = k->alloc(&second, size, arg);
	report(key, rc2);
	if (rc2 != cudaSuccess)
		second = NULL;
	/* a refused allocation leaves no error behind for the next call */
	cudaGetLastError();
	if (first) {
		snprintf(key, sizeof(key), "%s_free_first", k->name);
		must(key, k->release(first, arg));
	}
	if (second) {
		snprintf(key, sizeof(key), "%s_free_second", k->name);
		must(key, k->release(second, arg));
	}
	snprintf(key, sizeof(key), "%s_after", k->name);
	meminfo(key);
}

static void allocations(size_t size)
{
	static const struct kind plain = { "malloc", k_malloc, k_free };
	static const struct kind pitch = { "pitch", k_pitch, k_free };
	static const struct kind managed = { "managed", k_managed, k_free };
	static const struct kind async = { "async", k_async, k_async_free };
	static const struct kind array = { "array", k_array, k_array_free };
	run_kind(&plain, size, NULL);
	run_kind(&pitch, size, NULL);
	run_kind(&managed, size, NULL);

	cudaStream_t s = NULL;
	cudaEvent_t start = NULL, stop = NULL;
	if (must("stream_create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ||
	    must("event_create_start", cudaEventCreate(&start)) || must("event_create_stop", cudaEventCreate(&stop)))
		return;
	must("event_record_start", cudaEventRecord(start, s));
	run_kind(&async, size, s);
	must("event_record_stop", cudaEventRecord(stop, s));
	must("event_sync", cudaEventSynchronize(stop));
	float ms = -1;
	if (must("event_elapsed", cudaEventElapsedTime(&ms, start, stop)) == 0)
		printf("event_elapsed_nonnegative=%d\n", ms >= 0);
	must("event_destroy_start", cudaEventDestroy(start));
	must("event_destroy_stop", cudaEventDestroy(stop));
	must("stream_destroy", cudaStreamDestroy(s));

	run_kind(&array, size, NULL);
}

/* cudaDeviceReset gives back what the context held. */
static void reset(size_t size)
{
	void *p = NULL;
	if (must("reset_malloc", cudaMalloc(&p, size)))
		return;
	meminfo("before_reset");
	if (must("device_reset", cudaDeviceReset()))
		return;
	meminfo("after_reset");
	void *q = NULL;
	if (must("reset_malloc_again", cudaMalloc(&q, size)) == 0)
		must("reset_free_again", cudaFree(q));
}

/* The CUDA libraries this process mapped, one line each. */
static void mapped_libraries(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (f == NULL) {
		printf("maps_error=%s\n", strerror(errno));
		failed = 1;
		return;
	}
	char line[4096], last[4096] = "";
	while (fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		if (path == NULL)
			continue;
		path[strcspn(path, "\n")] = 0;
		const char *base = strrchr(path, '/') + 1;
		if (strncmp(base, "libcuda", 7) && strncmp(base, "libcublas", 9) && strncmp(base, "libgpuslice", 11) &&
		    strncmp(base, "libnvidia", 9))
			continue;
		if (strcmp(path, last) == 0)
			continue;
		snprintf(last, sizeof(last), "%s", path);
		printf("mapped=%s\n", path);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	char *end = NULL;
	unsigned long long size = argc == 2 ? strtoull(argv[1], &end, 10) : 0;
	if (argc != 2 || *end != '\0' || size < (1u << 20) || size % ROW) {
		fprintf(stderr, "usage: cudart_probe SIZE (bytes, a multiple of 64 KiB, at least 1 MiB)\n");
		return 2;
	}
	query();
	copies();
	allocations((size_t)size);
	reset((size_t)size);
	mapped_libraries();
	printf("done=1\n");
	return failed;
}
