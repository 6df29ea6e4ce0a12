/*
 * procaddr_replay: replays a list of cuGetProcAddress requests (one
 * "symbol cudaVersion flags" a line, '#' comments) against the libcuda.so.1
 * the loader finds, through the 4-argument cuGetProcAddress of CUDA 11.3 as
 * NVIDIA's runtime 11.8 calls it, and prints per request
 *
 *   resolve=SYMBOL VERSION FLAGS RESULT NAME
 *
 * where NAME is the exported symbol at the address returned ("-" for none).
 * Usage: procaddr_replay LIST. Exit status 1 when the list cannot be read or
 * libcuda.so.1 cannot be loaded, 0 otherwise.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*get_proc_address_fn)(const char *symbol, void **pfn, int cudaVersion, unsigned long long flags);

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: procaddr_replay LIST\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "r");
	if (f == NULL) {
		perror(argv[1]);
		return 1;
	}
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	get_proc_address_fn gpa = lib ? (get_proc_address_fn)dlsym(lib, "cuGetProcAddress") : NULL;
	if (gpa == NULL) {
		fprintf(stderr, "procaddr_replay: %s\n", dlerror());
		fclose(f);
		return 1;
	}
	Dl_info info;
	if (dladdr((void *)gpa, &info))
		printf("library=%s\n", info.dli_fname);
	char line[512], symbol[256];
	int version;
	unsigned long long flags;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#' || sscanf(line, "%255s %d %llu", symbol, &version, &flags) != 3)
			continue;
		void *fn = NULL;
		int rc = gpa(symbol, &fn, version, flags);
		const char *name = "-";
		if (fn != NULL && dladdr(fn, &info) && info.dli_sname != NULL)
			name = info.dli_sname;
		printf("resolve=%s %d %llu %d %s\n", symbol, version, flags, rc, name);
	}
	fclose(f);
	return 0;
}
