/*
 * expandable_segments: PyTorch's expandable-segments pattern with the
 * virtual-memory API: reserve a large address range once, then grow the
 * segment by creating physical chunks (cuMemCreate), mapping them at the end
 * (cuMemMap) and opening access (cuMemSetAccess). Growth stops at the first
 * denied chunk, as PyTorch would raise out-of-memory there.
 *
 *   expandable_segments [--step SIZE] [--count N] [--reserve SIZE] [--hold SECONDS] [--device N]
 *
 * Output:
 *   event=granularity bytes=2097152
 *   event=reserve bytes=... status=ok
 *   event=grow index=1 bytes=20971520 status=allowed mapped=20971520
 *   event=grow index=7 bytes=20971520 status=denied error=CUDA_ERROR_OUT_OF_MEMORY mapped=...
 *   event=summary chunks=6 mapped=... denied=1
 * Exit status: 0 when it ran as designed, 1 on an unexpected CUDA error, 2 on bad usage.
 */
#include "common.h"
#include "drvctx.h"

static const char *usage = "[--step SIZE] [--count N] [--reserve SIZE] [--hold SECONDS] [--device N]";

int main(int argc, char **argv)
{
	uint64_t step = 20ull << 20, reserve = 0;
	long count = 8, device = 0;
	double hold = 0;
	const struct ex_option opts[] = {
		{"--step", EX_SIZE, &step, 1, 0, NULL},
		{"--count", EX_LONG, &count, 1, 100000, NULL},
		{"--reserve", EX_SIZE, &reserve, 0, 0, NULL},
		{"--hold", EX_SECONDS, &hold, 0, 0, NULL},
		EX_DEVICE_OPTION(device),
	};
	EX_PARSE_ARGS(argc, argv, usage, opts);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("event=start step=%llu count=%ld device=%ld pid=%d\n", (unsigned long long)step, count, device,
	       (int)getpid());
	if (ex_driver_setup((int)device, NULL))
		return 1;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)device;
	size_t gran = 0;
	CUresult r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (r != CUDA_SUCCESS || gran == 0) {
		printf("event=error op=granularity error=%s\n", ex_cu_name(r));
		return 1;
	}
	printf("event=granularity bytes=%zu\n", gran);
	step = (step + gran - 1) / gran * gran;
	if (reserve == 0)
		reserve = step * (uint64_t)count;
	reserve = (reserve + gran - 1) / gran * gran;
	CUdeviceptr base = 0;
	r = cuMemAddressReserve(&base, reserve, 0, 0, 0);
	if (r != CUDA_SUCCESS) {
		printf("event=reserve bytes=%llu status=error error=%s\n", (unsigned long long)reserve, ex_cu_name(r));
		return 1;
	}
	printf("event=reserve bytes=%llu status=ok base=0x%llx\n", (unsigned long long)reserve, base);
	CUmemGenericAllocationHandle *h = calloc((size_t)count, sizeof(*h));
	long chunks = 0, denied = 0;
	uint64_t mapped = 0;
	int unexpected = 0;
	for (long i = 0; i < count && mapped + step <= reserve; i++) {
		r = cuMemCreate(&h[chunks], step, &prop, 0);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			denied++;
			printf("event=grow index=%ld bytes=%llu status=denied error=%s mapped=%llu\n", i + 1,
			       (unsigned long long)step, ex_cu_name(r), (unsigned long long)mapped);
			break;
		}
		CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		if (r == CUDA_SUCCESS && (r = cuMemMap(base + mapped, step, 0, h[chunks], 0)) == CUDA_SUCCESS)
			r = cuMemSetAccess(base + mapped, step, &acc, 1);
		if (r != CUDA_SUCCESS) {
			printf("event=grow index=%ld bytes=%llu status=error error=%s\n", i + 1, (unsigned long long)step,
			       ex_cu_name(r));
			unexpected = 1;
			break;
		}
		/* the new chunk is real memory, contiguous with the old ones */
		unsigned char *p = (unsigned char *)(uintptr_t)(base + mapped);
		p[0] = (unsigned char)(i + 1);
		p[step - 1] = (unsigned char)(i + 1);
		chunks++;
		mapped += step;
		printf("event=grow index=%ld bytes=%llu status=allowed mapped=%llu\n", i + 1, (unsigned long long)step,
		       (unsigned long long)mapped);
	}
	for (long i = 0; i < chunks; i++) {
		unsigned char *p = (unsigned char *)(uintptr_t)(base + (uint64_t)i * step);
		if (p[0] != (unsigned char)(i + 1) || p[step - 1] != (unsigned char)(i + 1)) {
			printf("event=error op=verify chunk=%ld\n", i + 1);
			unexpected = 1;
		}
	}
	if (hold > 0) {
		printf("event=hold seconds=%g\n", hold);
		ex_sleep_s(hold);
	}
	if (mapped && (r = cuMemUnmap(base, mapped)) != CUDA_SUCCESS) {
		printf("event=error op=unmap error=%s\n", ex_cu_name(r));
		unexpected = 1;
	}
	for (long i = 0; i < chunks; i++)
		if ((r = cuMemRelease(h[i])) != CUDA_SUCCESS) {
			printf("event=error op=release error=%s\n", ex_cu_name(r));
			unexpected = 1;
		}
	if ((r = cuMemAddressFree(base, reserve)) != CUDA_SUCCESS) {
		printf("event=error op=address_free error=%s\n", ex_cu_name(r));
		unexpected = 1;
	}
	printf("event=summary chunks=%ld mapped=%llu denied=%ld\n", chunks, (unsigned long long)mapped, denied);
	free(h);
	return unexpected;
}
