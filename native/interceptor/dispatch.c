/*
 * How programs reach the hooks besides plain symbol interposition:
 *  - dlsym (exported at GLIBC_2.2.5 and GLIBC_2.34): a hooked symbol name
 *    returns the hook when a session is configured and the real lookup
 *    succeeds; anything else is the real dlsym's answer (reached by a tail
 *    call, so glibc still sees the caller's return address and RTLD_NEXT
 *    keeps its meaning).
 *  - cuGetProcAddress / cuGetProcAddress_v2: the real driver resolves the
 *    request first; when the address it returns is the real entry point of
 *    a hooked variant (of this name, or of any name: cuGraphInstantiate
 *    resolves to cuGraphInstantiateWithFlags), the caller gets that
 *    variant's hook (so a legacy request, e.g. cuMemAlloc at version 2000,
 *    stays unhooked).
 * Both tables are hooks.def.
 */
#include <dlfcn.h>
#include <string.h>

#include "dispatch.h"
#include "gs.h"

const struct gs_hook gs_hooks[] = {
#define GS_HOOK(lib, base, sym, ver, ptds, ret, params) \
	{#base, #sym, ver, ptds, GS_LIB_##lib, GS_R_##sym, (void *)sym},
#include "hooks.def"
#undef GS_HOOK
};
const size_t gs_nhooks = sizeof(gs_hooks) / sizeof(gs_hooks[0]);

const struct gs_hook *gs_find_symbol(const char *name)
{
	if (!((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v')))
		return NULL;
	for (size_t i = 0; i < gs_nhooks; i++)
		if (strcmp(gs_hooks[i].symbol, name) == 0)
			return &gs_hooks[i];
	return NULL;
}

/* ---- dlsym ---- */

gs_dlsym_fn gs_dlsym_cached;

gs_dlsym_fn gs_real_dlsym_slow(void)
{
	void *f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (f == NULL)
		f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (f != NULL)
		__atomic_store_n(&gs_dlsym_cached, (gs_dlsym_fn)f, __ATOMIC_RELEASE);
	return (gs_dlsym_fn)f;
}

/* A hooked name: the hook when a session is configured, else the real
 * definition. A lookup that only found this library's own export (a
 * global-scope handle) counts only if a real definition follows it, so a
 * program probing for CUDA still sees none where there is none. */
static __attribute__((noinline)) void *dlsym_hooked(void *handle, const char *name,
						    const struct gs_hook *h)
{
	gs_dlsym_fn real = gs_real_dlsym();
	if (real == NULL)
		return NULL;
	void *r = real(handle, name);
	if (r == h->hook)
		r = real(RTLD_NEXT, name); /* the definition after this library */
	if (r == NULL)
		return NULL;
	return gs_session_configured() == 1 ? h->hook : r;
}

static inline __attribute__((always_inline)) void *dlsym_body(void *handle, const char *name)
{
	if (name != NULL && (name[0] == 'c' || name[0] == 'n')) {
		const struct gs_hook *h = gs_find_symbol(name);
		if (h != NULL)
			return dlsym_hooked(handle, name, h);
	}
	gs_dlsym_fn real = gs_real_dlsym();
	if (real == NULL)
		return NULL;
	return real(handle, name); /* tail call: keep the caller's return address */
}

__asm__(".symver gs_dlsym_v234, dlsym@@GLIBC_2.34");
__asm__(".symver gs_dlsym_v225, dlsym@GLIBC_2.2.5");

GS_EXPORT void *gs_dlsym_v234(void *handle, const char *name);
GS_EXPORT void *gs_dlsym_v225(void *handle, const char *name);

void *gs_dlsym_v234(void *handle, const char *name) { return dlsym_body(handle, name); }
void *gs_dlsym_v225(void *handle, const char *name) { return dlsym_body(handle, name); }

/* ---- cuGetProcAddress ---- */

static void gpa_rewrite(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
	void *got = *pfn;
	int base_known = 0, base_has_ptds = 0;
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib != GS_LIB_CU || strcmp(h->base, symbol) != 0)
			continue;
		base_known = 1;
		base_has_ptds |= h->ptds;
		if (got == h->hook)
			return;
		if (gs_real_get(h->ridx) == got) {
			*pfn = h->hook;
			return;
		}
	}
	/* A name whose answer is another name's hooked entry point (the
	 * driver resolves cuGraphInstantiate at 11040 to
	 * cuGraphInstantiateWithFlags): that entry point's hook, whose ABI is
	 * the one the driver handed out. */
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib == GS_LIB_CU && gs_real_get(h->ridx) == got) {
			*pfn = h->hook;
			return;
		}
	}
	if (!base_known)
		return;
	/* The driver answered with an address that is none of the exported
	 * variants. Up to the CUDA version hooks.def is complete for, the
	 * variant follows from the version and the per-thread flag; beyond it
	 * an unknown ABI may be meant, so the answer stays untouched. */
	if (ver > GS_TABLE_CUDA_VERSION) {
		gs_debug("cuGetProcAddress(%s, %d): unknown address from the driver, not hooked",
			 symbol, ver);
		return;
	}
	int want_ptds = base_has_ptds && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	const struct gs_hook *best = NULL;
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib != GS_LIB_CU || strcmp(h->base, symbol) != 0)
			continue;
		if (h->version <= ver && h->ptds == want_ptds &&
		    (best == NULL || h->version > best->version))
			best = h;
	}
	if (best != NULL) {
		gs_debug("cuGetProcAddress(%s, %d): unknown address from the driver, using the %s hook",
			 symbol, ver, best->symbol);
		*pfn = best->hook;
	}
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	gs_pfn_cuGetProcAddress real = GS_REAL(cuGetProcAddress);
	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL &&
	    gs_state() != GS_ST_INERT)
		gpa_rewrite(symbol, pfn, cudaVersion, flags);
	return r;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	gs_pfn_cuGetProcAddress_v2 real = GS_REAL(cuGetProcAddress_v2);
	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (r == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL &&
	    (symbolStatus == NULL || *symbolStatus == CU_GET_PROC_ADDRESS_SUCCESS) &&
	    gs_state() != GS_ST_INERT)
		gpa_rewrite(symbol, pfn, cudaVersion, flags);
	return r;
}
