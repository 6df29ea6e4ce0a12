/*
 * How programs reach the hooks besides plain symbol interposition:
 *  - dlsym (exported at GLIBC_2.2.5 and GLIBC_2.34): a hooked symbol name
 *    returns the hook when a session is configured and the real lookup
 *    succeeds; anything else is the real dlsym's answer (reached by a tail
 *    call, so glibc still sees the caller's return address and RTLD_NEXT
 *    keeps its meaning).
 *  - cuGetProcAddress / cuGetProcAddress_v2: the real driver resolves the
 *    request first; when the address it returns is the entry point of a
 *    hooked variant (of this name, or of any name: cuGraphInstantiate
 *    resolves to cuGraphInstantiateWithFlags), exported or private to the
 *    driver, the caller gets that variant's hook (so a legacy request, e.g.
 *    cuMemAlloc at version 2000, stays unhooked).
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

/* What the driver answers for each hooked variant when asked for it at the
 * version it appeared in, with its own stream flag: that variant's address
 * as this driver hands it out, exported or not. Asked the first time an
 * answer is none of the exported variants; NULL: not asked yet, GPA_NONE:
 * the driver gave nothing. */
#define GPA_NONE ((void *)1)
static void *gpa_variant[sizeof(gs_hooks) / sizeof(gs_hooks[0])];

static void *gpa_variant_address(size_t i)
{
	void *v = __atomic_load_n(&gpa_variant[i], __ATOMIC_RELAXED);
	if (v != NULL)
		return v;
	const struct gs_hook *h = &gs_hooks[i];
	cuuint64_t fl = h->ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	gs_pfn_cuGetProcAddress_v2 real2 = GS_REAL(cuGetProcAddress_v2);
	gs_pfn_cuGetProcAddress real4 = GS_REAL(cuGetProcAddress);
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult r = CUDA_ERROR_NOT_FOUND;
	if (real2 != NULL)
		r = real2(h->base, &v, h->version, fl, &st);
	else if (real4 != NULL)
		r = real4(h->base, &v, h->version, fl);
	if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || v == NULL)
		v = GPA_NONE;
	__atomic_store_n(&gpa_variant[i], v, __ATOMIC_RELAXED); /* the same answer in every thread */
	return v;
}

/* The hook for the driver's answer GOT to a lookup of SYMBOL at VER. An
 * exported variant is known by its address. Any other address is named by
 * the driver itself: it is the variant whose own lookup gives that address
 * (a driver may hand out private entry points; cuGraphInstantiate at 11040
 * answers with cuGraphInstantiateWithFlags, whose ABI differs from
 * cuGraphInstantiate_v2's, so no variant is ever inferred from the version).
 * An answer no hooked variant gives stays the driver's: a legacy entry
 * point (cuMemAlloc at 2000), an unhooked name, or an ABI newer than
 * hooks.def. */
static void gpa_rewrite(const char *symbol, void **pfn, int ver)
{
	void *got = *pfn;
	int base_known = 0;
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib != GS_LIB_CU || strcmp(h->base, symbol) != 0)
			continue;
		base_known = 1;
		if (got == h->hook)
			return;
		if (gs_real_get(h->ridx) == got) {
			*pfn = h->hook;
			return;
		}
	}
	if (!base_known)
		return;
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib == GS_LIB_CU && gs_real_get(h->ridx) == got) {
			*pfn = h->hook;
			return;
		}
	}
	for (size_t i = 0; i < gs_nhooks; i++) {
		const struct gs_hook *h = &gs_hooks[i];
		if (h->lib == GS_LIB_CU && h->version <= ver && gpa_variant_address(i) == got) {
			gs_debug("cuGetProcAddress(%s, %d): a private entry point of %s", symbol, ver, h->symbol);
			*pfn = h->hook;
			return;
		}
	}
	gs_debug("cuGetProcAddress(%s, %d): an address no hooked variant has, not hooked", symbol, ver);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	gs_pfn_cuGetProcAddress real = GS_REAL(cuGetProcAddress);
	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL &&
	    gs_state() != GS_ST_INERT)
		gpa_rewrite(symbol, pfn, cudaVersion);
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
		gpa_rewrite(symbol, pfn, cudaVersion);
	return r;
}
