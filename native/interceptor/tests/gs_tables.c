/*
 * gs_tables: prints where every driver entry point resolves, for the
 * hook-list consistency test (run once plain, once with libgpuslice.so).
 *
 *   gs_tables ENTRY_POINTS_TSV
 *
 * Lines:
 *   dlsym SYMBOL -> LIB:SYMBOL          dlsym(libcuda handle, SYMBOL): each row's default,
 *                                       per-thread and base names, and BASE_vK for its K-th version
 *   gpa BASE VERSION FLAGS rc=R -> ...  cuGetProcAddress_v2(BASE, VERSION, FLAGS)
 *   gpa4 BASE VERSION FLAGS rc=R -> ... the same through cuGetProcAddress (4 args)
 *                                       (each version of the row, and 13000)
 *   nvml SYMBOL -> ...                  dlsym(libnvidia-ml handle, SYMBOL)
 *   rtldnext dlsym -> ...               dlsym(RTLD_NEXT, "dlsym") from this program: the
 *                                       interposed dlsym when the caller is seen correctly
 *   rtlddefault SYMBOL -> ...           dlsym(RTLD_DEFAULT, SYMBOL)
 *   dlsymver GLIBC_x -> ...             dlsym reached through dlvsym(.., "dlsym", GLIBC_x),
 *                                       asked for cuMemAlloc_v2 on the libcuda handle
 * where LIB:SYMBOL is what dladdr says ("null" for no address).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include "cuda.h"

typedef CUresult (*pfn_gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*pfn_gpa4)(const char *, void **, int, cuuint64_t);
typedef void *(*pfn_dlsym)(void *, const char *);

/* a version past every row of the table (what a CUDA 13 runtime asks at) */
#define LATER_VERSION 13000

static void where(void *p)
{
	Dl_info info;
	if (p == NULL) {
		printf(" -> null\n");
		return;
	}
	if (dladdr(p, &info) == 0 || info.dli_fname == NULL) {
		printf(" -> ?\n");
		return;
	}
	const char *base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	printf(" -> %s:%s\n", base, info.dli_sname ? info.dli_sname : "?");
}

/* cuGetProcAddress_v2 and cuGetProcAddress of BASE at VER, without and with
 * the per-thread flag */
static void lookups(pfn_gpa2 gpa2, pfn_gpa4 gpa4, const char *base, int ver)
{
	for (int fl = 0; fl <= 2; fl += 2) {
		void *p = NULL;
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		CUresult r = gpa2(base, &p, ver, (cuuint64_t)fl, &st);
		printf("gpa %s %d %d rc=%d/%d", base, ver, fl, r, st);
		where(r == CUDA_SUCCESS ? p : NULL);
		p = NULL;
		r = gpa4(base, &p, ver, (cuuint64_t)fl);
		printf("gpa4 %s %d %d rc=%d", base, ver, fl, r);
		where(r == CUDA_SUCCESS ? p : NULL);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gs_tables ENTRY_POINTS_TSV\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "r");
	if (f == NULL) {
		perror(argv[1]);
		return 2;
	}
	void *cu = dlopen("libcuda.so.1", RTLD_NOW);
	void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (cu == NULL || nv == NULL) {
		fprintf(stderr, "gs_tables: %s\n", dlerror());
		return 2;
	}
	pfn_gpa2 gpa2 = (pfn_gpa2)dlsym(cu, "cuGetProcAddress_v2");
	pfn_gpa4 gpa4 = (pfn_gpa4)dlsym(cu, "cuGetProcAddress");
	if (gpa2 == NULL || gpa4 == NULL) {
		fprintf(stderr, "gs_tables: no cuGetProcAddress\n");
		return 2;
	}
	char line[1024];
	while (fgets(line, sizeof(line), f) != NULL) {
		if (line[0] == '#' || strncmp(line, "base_name\t", 10) == 0)
			continue;
		line[strcspn(line, "\r\n")] = '\0';
		char *fields[4] = {0};
		char *save = NULL;
		int n = 0;
		for (char *t = strtok_r(line, "\t", &save); t != NULL && n < 4; t = strtok_r(NULL, "\t", &save))
			fields[n++] = t;
		if (n != 4)
			continue;
		const char *base = fields[0], *def = fields[2], *ptds = fields[3];
		printf("dlsym %s", def);
		where(dlsym(cu, def));
		if (strcmp(ptds, "-") != 0) {
			printf("dlsym %s", ptds);
			where(dlsym(cu, ptds));
		}
		if (strcmp(base, def) != 0) {
			printf("dlsym %s", base);
			where(dlsym(cu, base));
		}
		if (strcmp(fields[1], "-") == 0)
			continue;
		char vers[256];
		snprintf(vers, sizeof(vers), "%s", fields[1]);
		char *vs = NULL;
		int k = 0;
		for (char *v = strtok_r(vers, ",", &vs); v != NULL; v = strtok_r(NULL, ",", &vs)) {
			int ver = atoi(v);
			if (++k >= 2) { /* the later ABIs' own symbols (cuGraphInstantiate_v2) */
				char vsym[160];
				snprintf(vsym, sizeof(vsym), "%s_v%d", base, k);
				if (strcmp(vsym, def) != 0) {
					printf("dlsym %s", vsym);
					where(dlsym(cu, vsym));
				}
			}
			lookups(gpa2, gpa4, base, ver);
		}
		lookups(gpa2, gpa4, base, LATER_VERSION);
	}
	fclose(f);
	const char *nvml_names[] = {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUUID",
				    "nvmlInit_v2"};
	for (size_t i = 0; i < sizeof(nvml_names) / sizeof(nvml_names[0]); i++) {
		printf("nvml %s", nvml_names[i]);
		where(dlsym(nv, nvml_names[i]));
	}
	const char *global_names[] = {"cuMemAlloc_v2", "cuGetProcAddress_v2", "nvmlDeviceGetMemoryInfo", "cuInit"};
	for (size_t i = 0; i < sizeof(global_names) / sizeof(global_names[0]); i++) {
		printf("rtlddefault %s", global_names[i]);
		where(dlsym(RTLD_DEFAULT, global_names[i]));
	}
	printf("rtldnext dlsym");
	where(dlsym(RTLD_NEXT, "dlsym"));
	const char *glibc[] = {"GLIBC_2.2.5", "GLIBC_2.34"};
	for (int i = 0; i < 2; i++) {
		pfn_dlsym d = (pfn_dlsym)dlvsym(RTLD_DEFAULT, "dlsym", glibc[i]);
		printf("dlsymver %s", glibc[i]);
		where(d != NULL ? d(cu, "cuMemAlloc_v2") : NULL);
		printf("dlsymfn %s", glibc[i]);
		where((void *)d);
	}
	return 0;
}
