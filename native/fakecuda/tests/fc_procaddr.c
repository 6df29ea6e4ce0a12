/*
 * fc_procaddr: resolves driver entry points the way callers do and names what
 * it got (dladdr), for the cuGetProcAddress tests.
 *
 *   fc_procaddr NAME:VERSION:FLAGS ...     each through cuGetProcAddress_v2
 *   fc_procaddr --v1 NAME:VERSION:FLAGS    through the 4-argument cuGetProcAddress
 *   fc_procaddr --runtime NAME:FLAGS       through cudaGetDriverEntryPoint
 *   fc_procaddr --call-unmodelled NAME     calls an entry point fakecuda does not model
 *
 *   event=lookup name=cuMemAlloc version=12060 flags=0 result=0 status=0 symbol=cuMemAlloc_v2
 */
#include <dlfcn.h>

#include "common.h"
#include "cuda.h"
#include "cuda_runtime_api.h"

static const char *symname(void *p)
{
	Dl_info info;
	if (p == NULL)
		return "-";
	if (dladdr(p, &info) == 0 || info.dli_sname == NULL)
		return "?";
	return info.dli_sname;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (h == NULL) {
		printf("event=error op=dlopen\n");
		return 1;
	}
	PFN_cuGetProcAddress_v12000 gpa2 = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
	PFN_cuGetProcAddress_v11030 gpa1 = (PFN_cuGetProcAddress_v11030)dlsym(h, "cuGetProcAddress");
	if (gpa1 == NULL || gpa2 == NULL)
		return 1;
	int mode = 0; /* 0: v2, 1: v1, 2: runtime, 3: call */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--v1") == 0) {
			mode = 1;
			continue;
		}
		if (strcmp(argv[i], "--runtime") == 0) {
			mode = 2;
			continue;
		}
		if (strcmp(argv[i], "--call-unmodelled") == 0) {
			mode = 3;
			continue;
		}
		char name[256];
		snprintf(name, sizeof(name), "%s", argv[i]);
		if (mode == 3) {
			CUresult (*f)(void *, void *, void *, void *) = (CUresult(*)(void *, void *, void *, void *))dlsym(h, name);
			if (f == NULL)
				return 1;
			printf("event=call name=%s result=%d\n", name, (int)f(NULL, NULL, NULL, NULL));
			continue;
		}
		char *c1 = strchr(name, ':');
		if (c1 == NULL)
			return 2;
		*c1 = 0;
		void *fn = (void *)0x1;
		if (mode == 2) {
			cudaError_t (*gdep)(const char *, void **, unsigned long long, enum cudaDriverEntryPointQueryResult *);
			void *rt = dlopen("libcudart.so.12", RTLD_NOW);
			if (rt == NULL)
				return 1;
			*(void **)&gdep = dlsym(rt, "cudaGetDriverEntryPoint");
			unsigned long long flags = strtoull(c1 + 1, NULL, 0);
			enum cudaDriverEntryPointQueryResult st = 99;
			cudaError_t e = gdep(name, &fn, flags, &st);
			printf("event=lookup api=runtime name=%s flags=%llu result=%d status=%d symbol=%s\n", name, flags, (int)e,
			       (int)st, symname(fn));
			continue;
		}
		char *c2 = strchr(c1 + 1, ':');
		if (c2 == NULL)
			return 2;
		*c2 = 0;
		int version = atoi(c1 + 1);
		unsigned long long flags = strtoull(c2 + 1, NULL, 0);
		CUresult r;
		int st = 99;
		if (mode == 1) {
			r = gpa1(name, &fn, version, flags);
		} else {
			CUdriverProcAddressQueryResult s = (CUdriverProcAddressQueryResult)99;
			r = gpa2(name, &fn, version, flags, &s);
			st = (int)s;
		}
		printf("event=lookup api=%s name=%s version=%d flags=%llu result=%d status=%d symbol=%s\n",
		       mode == 1 ? "v1" : "v2", name, version, flags, (int)r, st, symname(fn));
	}
	return 0;
}
