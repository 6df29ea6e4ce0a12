/*
 * cublas_probe: a program built with gcc against NVIDIA's CUDA 11.8 headers
 * and linked to NVIDIA's libcublas.so.11 and libcudart.so.11.0. It creates a
 * cuBLAS handle, allocates two device vectors of SIZE bytes each (under a
 * quota between SIZE and 2*SIZE the second must be refused), moves a vector
 * through device memory with cublasSetVector/cublasGetVector, destroys the
 * handle, and lists the CUDA libraries mapped into the process. One
 * `key=value` line per fact.
 *
 *   cublas_probe SIZE
 *
 * Exit status: 0 when it ran to the end, 1 when a call that must work
 * failed, 2 on bad usage.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static int must_cuda(const char *what, cudaError_t rc)
{
	printf("%s=%d\n", what, (int)rc);
	if (rc != cudaSuccess) {
		printf("%s_error=%s\n", what, cudaGetErrorName(rc));
		failed = 1;
		return -1;
	}
	return 0;
}

static int must_blas(const char *what, cublasStatus_t st)
{
	printf("%s=%d\n", what, (int)st);
	if (st != CUBLAS_STATUS_SUCCESS) {
		failed = 1;
		return -1;
	}
	return 0;
}

static void meminfo(const char *when)
{
	size_t freeb = 0, total = 0;
	if (must_cuda("meminfo", cudaMemGetInfo(&freeb, &total)) == 0)
		printf("meminfo_%s_free=%zu\nmeminfo_%s_total=%zu\n", when, freeb, when, total);
}

static void mapped_libraries(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (f == NULL) {
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
		if ((strncmp(base, "libcuda", 7) && strncmp(base, "libcublas", 9) && strncmp(base, "libgpuslice", 11)) ||
		    strcmp(path, last) == 0)
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
	if (argc != 2 || *end != '\0' || size < 4096) {
		fprintf(stderr, "usage: cublas_probe SIZE (bytes, at least 4096)\n");
		return 2;
	}
	cublasHandle_t h;
	if (must_blas("create", cublasCreate(&h)))
		goto out;
	int version = 0;
	if (must_blas("get_version", cublasGetVersion(h, &version)) == 0)
		printf("cublas_version=%d\n", version);
	meminfo("created");

	float *x = NULL, *y = NULL;
	cudaError_t rc = cudaMalloc((void **)&x, size);
	printf("alloc_first=%d\n", (int)rc);
	if (rc != cudaSuccess) {
		failed = 1;
		x = NULL;
	}
	meminfo("held");
	rc = cudaMalloc((void **)&y, size);
	printf("alloc_second=%d\n", (int)rc);
	if (rc != cudaSuccess)
		y = NULL;
	cudaGetLastError();

	if (x != NULL) {
		enum { N = 1024 };
		static float in[N], back[N];
		for (int i = 0; i < N; i++)
			in[i] = (float)i * 0.5f - 7.0f;
		if (must_blas("set_vector", cublasSetVector(N, sizeof(float), in, 1, x, 1)) == 0 &&
		    must_blas("get_vector", cublasGetVector(N, sizeof(float), x, 1, back, 1)) == 0) {
			int ok = memcmp(in, back, sizeof(in)) == 0;
			printf("vector=%s\n", ok ? "ok" : "mismatch");
			if (!ok)
				failed = 1;
		}
		must_cuda("free_first", cudaFree(x));
	}
	if (y != NULL)
		must_cuda("free_second", cudaFree(y));
	meminfo("freed");
	must_blas("destroy", cublasDestroy(h));
out:
	mapped_libraries();
	printf("done=1\n");
	return failed;
}
