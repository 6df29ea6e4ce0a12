/*
 * Build the shared libraries that go into other people's processes (the
 * interceptor, and fakecuda, which stands in for the vendor's libraries) so
 * that they load on glibc older than the build machine's.
 *
 * Since glibc 2.34, dlopen & co. and the pthread functions live in libc.so.6
 * under the new symbol version GLIBC_2.34, and fstat is a real symbol
 * (GLIBC_2.33). A library built here would reference those versions and
 * fail to load on an older glibc (e.g. a container of Ubuntu 20.04, glibc
 * 2.31): with LD_PRELOAD, every program of the job would then fail to
 * start. The versions every glibc since 2.2.5 provides are named instead;
 * glibc 2.34+ keeps them as aliases of the same functions. On an older
 * glibc they are in libdl.so.2 and libpthread.so.0, which the libraries
 * therefore list as needed (mk/: GLIBC_COMPAT_LIBS).
 *
 * Forced into every compilation unit of those libraries with
 * `-include glibc_compat.h`; x86-64 glibc only (elsewhere it is empty).
 * A test (tests/interceptor, TestOldGlibc) runs the interceptor on glibc
 * 2.31 and checks the versions the libraries require.
 */
#ifndef GPUSLICE_GLIBC_COMPAT_H
#define GPUSLICE_GLIBC_COMPAT_H

#if defined(__x86_64__) && defined(__linux__)
#include <features.h>
#if defined(__GLIBC__)

#define GS_COMPAT_SYMVER(name) __asm__(".symver " #name "," #name "@GLIBC_2.2.5");

GS_COMPAT_SYMVER(dlopen)
GS_COMPAT_SYMVER(dlclose)
GS_COMPAT_SYMVER(dlerror)
GS_COMPAT_SYMVER(dlvsym)
#ifndef GLIBC_COMPAT_DEFINES_DLSYM /* the interceptor defines dlsym itself */
GS_COMPAT_SYMVER(dlsym)
#endif
GS_COMPAT_SYMVER(pthread_once)
GS_COMPAT_SYMVER(pthread_key_create)
GS_COMPAT_SYMVER(pthread_key_delete)
GS_COMPAT_SYMVER(pthread_getspecific)
GS_COMPAT_SYMVER(pthread_setspecific)
GS_COMPAT_SYMVER(pthread_mutex_trylock)
GS_COMPAT_SYMVER(pthread_create)
GS_COMPAT_SYMVER(pthread_join)
GS_COMPAT_SYMVER(pthread_detach)
GS_COMPAT_SYMVER(pthread_mutexattr_init)
GS_COMPAT_SYMVER(pthread_mutexattr_destroy)
GS_COMPAT_SYMVER(pthread_mutexattr_setpshared)
/* robust mutexes came with glibc 2.12 */
__asm__(".symver pthread_mutexattr_setrobust,pthread_mutexattr_setrobust@GLIBC_2.12");
__asm__(".symver pthread_mutex_consistent,pthread_mutex_consistent@GLIBC_2.12");

/* fstat, stat: before 2.33 header inlines over __fxstat and __xstat,
 * which every glibc still exports at GLIBC_2.2.5 (x86-64 stat version 1). */
#include <sys/stat.h>
extern int __fxstat(int ver, int fd, struct stat *buf);
extern int __xstat(int ver, const char *path, struct stat *buf);
GS_COMPAT_SYMVER(__fxstat)
GS_COMPAT_SYMVER(__xstat)
#define fstat(fd, buf) __fxstat(1, (fd), (buf))
#define stat(path, buf) __xstat(1, (path), (buf))

#undef GS_COMPAT_SYMVER
#endif
#endif
#endif
