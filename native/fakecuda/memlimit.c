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

void fc_lim_reap_locked(void)
{
	bool changed = false;
	for (unsigned i = 0; i < FC_LIM_ENTRIES; i++) {
		struct fc_shm_limit *e = &fc_shm->limit[i];
		uint32_t g = atomic_load(&e->gen);
		if (!(g & 1) || fc_cgroup_id(e->path) == e->cgid)
			continue;
		atomic_store(&e->gen, g + 1); /* the cgroup is gone: its limit with it */
		atomic_fetch_sub(&fc_shm->dev[e->dev].nlimits, 1);
		changed = true;
	}
	if (changed)
		atomic_fetch_add(&fc_shm->lim_gen, 1);
}

/* ---- this process's cgroup ---- */

/* The cgroup2 mount's point and root (/proc/self/mountinfo); 0 or -1. */
static int cgroup2_mount(char *point, size_t plen, char *root, size_t rlen)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return -1;
	char line[4096];
	int rv = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		/* id parent maj:min root point opts [optional...] - fstype source superopts */
		char *dash = strstr(line, " - ");
		if (dash == NULL || strncmp(dash + 3, "cgroup2 ", 8) != 0)
			continue;
		char r[1024], p[1024];
		if (sscanf(line, "%*s %*s %*s %1023s %1023s", r, p) != 2)
			continue;
		snprintf(point, plen, "%s", p);
		snprintf(root, rlen, "%s", r);
		rv = 0;
		break;
	}
	fclose(f);
	return rv;
}

/* The directory of this process's cgroup v2; 0 or -1. */
static int self_cgroup_dir(char *out, size_t len, size_t *mountlen)
{
	static char point[1024], root[1024];
	static _Atomic int mount_known;
	if (!atomic_load(&mount_known)) {
		if (cgroup2_mount(point, sizeof(point), root, sizeof(root)) != 0)
			return -1;
		atomic_store(&mount_known, 1);
	}
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return -1;
	char line[4096];
	int rv = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		char *path = line + 3;
		path[strcspn(path, "\n")] = 0;
		size_t rl = strlen(root);
		if (rl > 1 && strncmp(path, root, rl) == 0)
			path += rl; /* relative to the mount's root */
		if (strcmp(path, "/") == 0)
			path = "";
		if ((size_t)snprintf(out, len, "%s%s", point, path) < len) {
			*mountlen = strlen(point);
			rv = 0;
		}
		break;
	}
	fclose(f);
	return rv;
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
