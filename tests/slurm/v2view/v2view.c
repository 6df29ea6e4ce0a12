/*
 * libv2view.so: the test cluster's slurmd and slurmstepd see a cgroup v2
 * host on a machine that mounts cgroup v1 hierarchies beside cgroup v2
 * (a "hybrid" host).
 *
 * Slurm's cgroup/v2 plugin reads /proc/self/cgroup and refuses to start
 * when it has more than the one "0::" line of the unified hierarchy
 * ("Hybrid mode is not supported"), although nothing it does under
 * cgroup/v2 touches a v1 hierarchy. This machine's v1 hierarchies belong to
 * the machine (they hold other cgroups and cannot be unmounted), so the
 * suite preloads this library into slurmd:
 * opening /proc/self/cgroup (or /proc/thread-self/cgroup, /proc/<own
 * pid>/cgroup) gives that file's "0::" line alone.
 *
 * The test hosts have no pid namespace of their own (their processes keep
 * the machine's pids, which the tests and fakecuda's process figures
 * share), so pid 1 is the machine's init, outside the host's cgroup
 * namespace. Slurm 24.11 finds the top of the node's cgroup tree from its
 * init's cgroup (/proc/1/cgroup and /proc/1/mountinfo). With
 * V2VIEW_INIT_PID set, those two files are the ones of that process: the
 * process holding the host's namespaces, the node's own init.
 *
 * Every other file, and everything the kernel does (the cgroup v2 tree,
 * process tracking, the eBPF device filter), is the kernel's own.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Which file the caller opens: 0 any other, 1 its own cgroup file, 2 the
 * node init's cgroup file, 3 the node init's mountinfo. */
enum { OTHER, OWN_CGROUP, INIT_CGROUP, INIT_MOUNTINFO };

static int which_file(const char *path)
{
	char mine[64];

	if (!path)
		return OTHER;
	if (!strcmp(path, "/proc/self/cgroup") || !strcmp(path, "/proc/thread-self/cgroup"))
		return OWN_CGROUP;
	snprintf(mine, sizeof(mine), "/proc/%d/cgroup", (int)getpid());
	if (!strcmp(path, mine))
		return OWN_CGROUP;
	if (getenv("V2VIEW_INIT_PID")) {
		if (!strcmp(path, "/proc/1/cgroup"))
			return INIT_CGROUP;
		if (!strcmp(path, "/proc/1/mountinfo"))
			return INIT_MOUNTINFO;
	}
	return OTHER;
}

static int real_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

/* A memfd holding the cgroup v2 line of the cgroup file at path; -1 on
 * failure (the caller then opens the real file). */
static int unified_view(const char *path, int flags)
{
	char buf[16384], *line, *save = NULL;
	ssize_t n, len = 0;
	int in, out;

	in = real_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	if (in < 0)
		return -1;
	while (len < (ssize_t)sizeof(buf) - 1 && (n = read(in, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += n;
	close(in);
	buf[len] = '\0';
	out = memfd_create("cgroup", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (out < 0)
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "0::", 3))
			continue;
		if (write(out, line, strlen(line)) < 0 || write(out, "\n", 1) < 0) {
			close(out);
			return -1;
		}
	}
	if (lseek(out, 0, SEEK_SET) < 0) {
		close(out);
		return -1;
	}
	return out;
}

static int do_open(int dirfd, const char *path, int flags, mode_t mode)
{
	char init[64];
	int fd = -1;

	if ((flags & O_ACCMODE) != O_RDONLY)
		return real_openat(dirfd, path, flags, mode);
	switch (which_file(path)) {
	case OWN_CGROUP:
		fd = unified_view("/proc/self/cgroup", flags);
		break;
	case INIT_CGROUP:
		snprintf(init, sizeof(init), "/proc/%s/cgroup", getenv("V2VIEW_INIT_PID"));
		fd = unified_view(init, flags);
		break;
	case INIT_MOUNTINFO:
		snprintf(init, sizeof(init), "/proc/%s/mountinfo", getenv("V2VIEW_INIT_PID"));
		return real_openat(AT_FDCWD, init, flags, mode);
	}
	if (fd >= 0)
		return fd;
	return real_openat(dirfd, path, flags, mode);
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	return do_open(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	return do_open(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0); }

/* On 64-bit Linux the 64 variants are the same calls. */
int open64(const char *path, int flags, ...) __attribute__((alias("open")));
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));
int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));
int __openat64_2(int dirfd, const char *path, int flags) __attribute__((alias("__openat_2")));
