/*
 * The node's memory limits per cgroup (NVML's nvmlDeviceSetMemoryLimits_v1,
 * R615), shared by the driver and NVML: the table in the state, cgroup v2
 * lookups, and giving back what a process charged.
 *
 * A limit belongs to one device and one cgroup v2 directory, known by its
 * cgroup id (the directory's inode number), never by its path alone: a
 * cgroup removed and made again under the same name (Slurm reuses job_<id>
 * on requeue) is a new cgroup with no limit. An entry whose directory is
 * gone is dead and is cleared when next seen (reap), as removing a cgroup
 * clears its limits. As with the kernel's dmem controller, every limit on
 * a process's cgroup or one of its ancestors applies to its allocations.
 */
#include "fc_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define CGROUP2_MAGIC 0x63677270 /* CGROUP2_SUPER_MAGIC */

_Static_assert(sizeof(struct fc_shm_limit) == 512, "fc_shm_limit");
_Static_assert(sizeof(struct fc_shm_limrec) == 16, "fc_shm_limrec");

uint64_t fc_cgroup_id(const char *path)
{
	struct statfs fs;
	struct stat st;
	if (statfs(path, &fs) != 0 || fs.f_type != CGROUP2_MAGIC)
		return 0;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	return (uint64_t)st.st_ino;
}

int fc_lim_lock(void)
{
	int r = pthread_mutex_lock(&fc_shm->lim_lock);
	if (r == EOWNERDEAD) /* a setter died holding it: the table is consistent entry by entry */
		r = pthread_mutex_consistent(&fc_shm->lim_lock);
	return r;
}

void fc_lim_unlock(void)
{
	pthread_mutex_unlock(&fc_shm->lim_lock);
}

/* Whether an entry's cgroup is gone: its path is now another cgroup (made
 * again), or is absent from a cgroup v2 directory that is there. A path
 * that cannot be resolved at all is another mount namespace's view (a
 * process of a cgroup namespace with its own cgroup2 mount): not a verdict. */
static bool entry_dead(const struct fc_shm_limit *e)
{
	struct stat st;
	if (stat(e->path, &st) == 0)
		return fc_cgroup_id(e->path) != e->cgid;
	if (errno != ENOENT)
		return false;
	char parent[FC_LIM_PATH];
	snprintf(parent, sizeof(parent), "%s", e->path);
	char *slash = strrchr(parent, '/');
	if (slash == NULL || slash == parent)
		return false;
	*slash = 0;
	return fc_cgroup_id(parent) != 0;
}

void fc_lim_reap_locked(void)
{
	bool changed = false;
	for (unsigned i = 0; i < FC_LIM_ENTRIES; i++) {
		struct fc_shm_limit *e = &fc_shm->limit[i];
		uint32_t g = atomic_load(&e->gen);
		if (!(g & 1) || !entry_dead(e))
			continue;
		atomic_store(&e->gen, g + 1); /* the cgroup is gone: its limit with it */
		atomic_fetch_sub(&fc_shm->dev[e->dev].nlimits, 1);
		changed = true;
	}
	if (changed)
		atomic_fetch_add(&fc_shm->lim_gen, 1);
}

/* ---- this process's cgroup ---- */

/* This process's cgroup v2 path ("0::" of /proc/self/cgroup, relative to
 * its cgroup namespace's root); 0 or -1. */
static int self_cgroup_path(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return -1;
	char line[4096];
	int rv = -1;
	while (rv != 0 && fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = 0;
		if ((size_t)snprintf(out, len, "%s", line + 3) < len)
			rv = 0;
	}
	fclose(f);
	return rv;
}

static bool procs_has(const char *dir, pid_t pid)
{
	char path[4200], line[32];
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return false;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = atoi(line) == (int)pid;
	fclose(f);
	return found;
}

/* The directory under dir (len bytes used) whose cgroup.procs lists pid. */
static bool find_pid(char *dir, size_t cap, pid_t pid, int depth, int *budget)
{
	if (procs_has(dir, pid))
		return true;
	DIR *d = depth < 32 ? opendir(dir) : NULL;
	if (d == NULL)
		return false;
	size_t l = strlen(dir);
	struct dirent *e;
	bool found = false;
	while (!found && --*budget > 0 && (e = readdir(d)) != NULL) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(dir + l, cap - l, "/%s", e->d_name) >= cap - l)
			continue;
		found = find_pid(dir, cap, pid, depth + 1, budget);
		if (!found)
			dir[l] = 0;
	}
	closedir(d);
	return found;
}

/* The directory of this process's cgroup v2 and the length of the mount
 * point it is under; 0 or -1. The cgroup2 mount used is the last listed in
 * /proc/self/mountinfo whose root holds the process's cgroup (a namespace's
 * own mount, root "/", is listed after the mounts it shadows); when only a
 * mount of an ancestor of the namespace's root is there (root "/.."), the
 * process's directory is found by its pid in cgroup.procs. */
static int self_cgroup_dir(char *out, size_t len, size_t *mountlen)
{
	char cg[4096], line[4096], point[1024] = "", any[1024] = "", root[1024] = "";
	if (self_cgroup_path(cg, sizeof(cg)) != 0)
		return -1;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		/* id parent maj:min root point opts [optional...] - fstype source superopts */
		char *dash = strstr(line, " - ");
		char r[1024], p[1024];
		if (dash == NULL || strncmp(dash + 3, "cgroup2 ", 8) != 0 ||
		    sscanf(line, "%*s %*s %*s %1023s %1023s", r, p) != 2)
			continue;
		snprintf(any, sizeof(any), "%s", p);
		size_t rl = strlen(r);
		if (strcmp(r, "/") == 0 || (strncmp(cg, r, rl) == 0 && (cg[rl] == '/' || cg[rl] == 0))) {
			snprintf(point, sizeof(point), "%s", p);
			snprintf(root, sizeof(root), "%s", r);
		}
	}
	fclose(f);
	if (point[0] != 0) {
		const char *rel = strcmp(root, "/") == 0 ? cg : cg + strlen(root);
		if (strcmp(rel, "/") == 0)
			rel = "";
		*mountlen = strlen(point);
		return (size_t)snprintf(out, len, "%s%s", point, rel) < len ? 0 : -1;
	}
	if (any[0] == 0 || (size_t)snprintf(out, len, "%s", any) >= len)
		return -1;
	*mountlen = strlen(any);
	int budget = 100000;
	return find_pid(out, len, getpid(), 0, &budget) ? 0 : -1;
}

unsigned fc_lim_applicable(unsigned phys, uint32_t ent[FC_LIM_DEPTH], uint32_t gen[FC_LIM_DEPTH])
{
	char dir[4096];
	size_t mlen;
	unsigned n = 0;
	if (self_cgroup_dir(dir, sizeof(dir), &mlen) != 0)
		return 0;
	for (;;) {
		uint64_t id = fc_cgroup_id(dir);
		for (unsigned i = 0; id != 0 && i < FC_LIM_ENTRIES && n < FC_LIM_DEPTH; i++) {
			struct fc_shm_limit *e = &fc_shm->limit[i];
			uint32_t g = atomic_load(&e->gen);
			if ((g & 1) && e->dev == phys && e->cgid == id) {
				ent[n] = i;
				gen[n++] = g;
			}
		}
		size_t l = strlen(dir);
		if (l <= mlen)
			break; /* the mount's root: the top of the hierarchy */
		char *slash = strrchr(dir, '/');
		if (slash == NULL || (size_t)(slash - dir) < mlen)
			break;
		*slash = 0;
	}
	return n;
}

void fc_lim_meminfo(unsigned phys, uint64_t *total, uint64_t *free_bytes)
{
	const struct fc_shm_dev *d = &fc_shm->dev[phys];
	uint64_t used = atomic_load(&((struct fc_shm_dev *)d)->used);
	*total = d->capacity;
	*free_bytes = used >= d->capacity ? 0 : d->capacity - used;
	if (atomic_load(&((struct fc_shm_dev *)d)->nlimits) == 0)
		return;
	uint32_t ent[FC_LIM_DEPTH], gen[FC_LIM_DEPTH];
	unsigned n = fc_lim_applicable(phys, ent, gen);
	for (unsigned k = 0; k < n; k++) {
		struct fc_shm_limit *e = &fc_shm->limit[ent[k]];
		uint64_t hard = atomic_load(&e->hard), u = atomic_load(&e->used);
		if (atomic_load(&e->gen) != gen[k])
			continue;
		if (hard < *total)
			*total = hard;
		uint64_t room = u >= hard ? 0 : hard - u;
		if (room < *free_bytes)
			*free_bytes = room;
	}
}

void fc_lim_release_slot(unsigned si)
{
	if (si >= FC_SHM_SLOTS)
		return;
	for (unsigned r = 0; r < FC_LIM_RECS; r++) {
		struct fc_shm_limrec *rec = &fc_shm->limrec[si][r];
		uint32_t ent = atomic_exchange(&rec->ent, 0);
		uint64_t bytes = atomic_exchange(&rec->bytes, 0);
		if (ent == 0 || ent > FC_LIM_ENTRIES || bytes == 0)
			continue;
		struct fc_shm_limit *e = &fc_shm->limit[ent - 1];
		if (atomic_load(&e->gen) == atomic_load(&rec->gen))
			fc_sub_saturating(&e->used, bytes);
	}
}
