/* The real dlsym (glibc's), found with dlvsym(RTLD_NEXT, ...). */
#ifndef GPUSLICE_DISPATCH_H
#define GPUSLICE_DISPATCH_H

typedef void *(*gs_dlsym_fn)(void *handle, const char *name);
gs_dlsym_fn gs_real_dlsym_slow(void);
extern gs_dlsym_fn gs_dlsym_cached;

static inline gs_dlsym_fn gs_real_dlsym(void)
{
	gs_dlsym_fn f = __atomic_load_n(&gs_dlsym_cached, __ATOMIC_ACQUIRE);
	return f != NULL ? f : gs_real_dlsym_slow();
}

#endif
