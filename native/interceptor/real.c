/*
 * Real entry points: looked up once each, on first use, with the real dlsym
 * on a handle from dlopen("libcuda.so.1") / dlopen("libnvidia-ml.so.1").
 * (RTLD_NEXT would miss a libcuda the program dlopened lazily.) When the
 * library cannot be opened by that name, the symbol is looked up after this
 * library in the global scope instead.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "dispatch.h"
#include "gs.h"

void *gs_real[GS_NREAL];
gs_pfn_cuMemAlloc_v2 gs_hot_alloc;
gs_pfn_cuMemFree_v2 gs_hot_free;
gs_pfn_cuCtxGetDevice gs_hot_getdev;

static const struct {
	const char *name;
	int lib;
} real_names[GS_NREAL] = {
#define GS_HOOK(lib, base, sym, ver, ptds, ret, params) [GS_R_##sym] = {#sym, GS_LIB_##lib},
#include "hooks.def"
#undef GS_HOOK
#define GS_X(lib, sym, ret, params) [GS_R_##sym] = {#sym, GS_LIB_##lib},
	GS_EXTRAS(GS_X)
#undef GS_X
};

static pthread_mutex_t real_mu = PTHREAD_MUTEX_INITIALIZER;
static void *lib_handle[2];
static int lib_tried[2];
static const char *const lib_name[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};

void *gs_real_resolve(int idx)
{
	if (idx < 0 || idx >= GS_NREAL)
		return NULL;
	pthread_mutex_lock(&real_mu);
	void *p = gs_real[idx];
	if (p == NULL) {
		int lib = real_names[idx].lib;
		if (!lib_tried[lib]) {
			lib_tried[lib] = 1;
			lib_handle[lib] = dlopen(lib_name[lib], RTLD_LAZY | RTLD_LOCAL);
			if (lib_handle[lib] == NULL)
				gs_debug("cannot open %s; using the next definitions instead", lib_name[lib]);
		}
		gs_dlsym_fn real_dlsym = gs_real_dlsym();
		if (real_dlsym != NULL) {
			p = real_dlsym(lib_handle[lib] != NULL ? lib_handle[lib] : RTLD_NEXT,
				       real_names[idx].name);
			if (p == NULL && lib_handle[lib] != NULL)
				p = real_dlsym(RTLD_NEXT, real_names[idx].name);
		}
		if (p != NULL) {
			/* the hot copies first: whoever sees gs_real[idx] set
			 * (gs_own_slow, gs_front_claim) sees them too */
			if (idx == GS_R_cuMemAlloc_v2)
				__atomic_store_n(&gs_hot_alloc, (gs_pfn_cuMemAlloc_v2)p, __ATOMIC_RELAXED);
			else if (idx == GS_R_cuMemFree_v2)
				__atomic_store_n(&gs_hot_free, (gs_pfn_cuMemFree_v2)p, __ATOMIC_RELAXED);
			else if (idx == GS_R_cuCtxGetDevice)
				__atomic_store_n(&gs_hot_getdev, (gs_pfn_cuCtxGetDevice)p, __ATOMIC_RELAXED);
			__atomic_store_n(&gs_real[idx], p, __ATOMIC_RELEASE);
		}
		else
			gs_debug("real %s not found", real_names[idx].name);
	}
	pthread_mutex_unlock(&real_mu);
	return p;
}
