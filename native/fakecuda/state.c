/*
 * The node-wide fake-GPU state: /dev/shm/fakecuda-<FAKECUDA_STATE>.
 *
 * The first process to attach creates it (under flock) from its
 * FAKECUDA_DEVICES; later processes adopt the devices recorded in it, just as
 * every process on a node sees the same physical GPUs. Capacity accounting
 * uses 64-bit atomics only: a device's `used` is reserved with one CAS
 * against its capacity, and each process has a slot recording what it holds
 * per device. Slots of dead processes are reclaimed by sweeps (when an
 * allocation would not fit and whenever NVML lists processes); a clean exit
 * gives everything back at once.
 *
 * Sweeps and listings cost what the live slots cost, not what the node
 * ever held: they stop at slot_hwm (slots are taken lowest first), and a
 * slot's owner is known alive from its robust mutex (struct fc_shm_slot)
 * without a system call; /proc is read only for a slot whose mutex says
 * its thread is gone (a thread that exited in a live process, or an exec).
 */
#include "fc_internal.h"
#include "size_suffix.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(struct fc_shm_dev) == 256, "fc_shm_dev");
_Static_assert(sizeof(struct fc_shm_slot) == 256, "fc_shm_slot");
_Static_assert(offsetof(struct fc_shm, dev) == 4096, "fc_shm header");

FC_HIDDEN struct fc_shm *fc_shm;
FC_HIDDEN struct fc_shm_slot *fc_self_slot;
FC_HIDDEN _Atomic int fc_released;
FC_HIDDEN uint64_t fc_ctx_bytes = FC_DEFAULT_CTX_BYTES;
FC_HIDDEN uint64_t fc_module_bytes;
FC_HIDDEN int fc_alloc_granule = 1;
FC_HIDDEN struct fc_shm_slot fc_fork_slot; /* placeholder in a forked child until first use */
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

void fc_state_after_fork(void)
{
	pthread_mutex_init(&register_lock, NULL);
	fc_self_slot = &fc_fork_slot;
}

struct fc_shm_slot *fc_state_slot_slow(void)
{
	pthread_mutex_lock(&register_lock);
	if (fc_self_slot == &fc_fork_slot)
		fc_state_register_self();
	pthread_mutex_unlock(&register_lock);
	return fc_self_slot;
}

void fc_sub_saturating(_Atomic uint64_t *v, uint64_t n)
{
	uint64_t cur = atomic_load_explicit(v, memory_order_relaxed);
	for (;;) {
		uint64_t next = cur > n ? cur - n : 0;
		if (atomic_compare_exchange_weak_explicit(v, &cur, next, memory_order_acq_rel, memory_order_relaxed))
			return;
	}
}

static void canonical_config(const struct fc_config *cfg, char *out, size_t len)
{
	size_t off = 0;
	out[0] = 0;
	for (unsigned i = 0; i < cfg->ndev && off < len; i++)
		off += (size_t)snprintf(out + off, len - off, "%s%llu", i ? "," : "",
					(unsigned long long)cfg->capacity[i]);
}

static void human_size(uint64_t b, char *out, size_t len)
{
	if (b % (1ULL << 30) == 0)
		snprintf(out, len, "%llu GiB", (unsigned long long)(b >> 30));
	else if (b % (1ULL << 20) == 0)
		snprintf(out, len, "%llu MiB", (unsigned long long)(b >> 20));
	else
		snprintf(out, len, "%llu B", (unsigned long long)b);
}

static bool fc_limits_enabled_in(const struct fc_shm *s)
{
	return (s->features & FC_FEATURE_MEMLIMITS) != 0;
}

static void init_shm(struct fc_shm *s, const struct fc_config *cfg)
{
	s->version = FC_SHM_VERSION;
	s->ndev = cfg->ndev;
	s->nslots = FC_SHM_SLOTS;
	canonical_config(cfg, s->config, sizeof(s->config));
	s->features = cfg->memlimits ? FC_FEATURE_MEMLIMITS : 0;
	atomic_store(&s->lim_gen, 0);
	pthread_mutexattr_t a;
	if (pthread_mutexattr_init(&a) == 0) {
		(void)pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		(void)pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		(void)pthread_mutex_init(&s->lim_lock, &a);
		pthread_mutexattr_destroy(&a);
	}
	for (unsigned i = 0; i < cfg->ndev; i++) {
		struct fc_shm_dev *d = &s->dev[i];
		char hs[32];
		fc_uuid_for_index(i, d->uuid_bytes, d->uuid);
		human_size(cfg->capacity[i], hs, sizeof(hs));
		snprintf(d->name, sizeof(d->name), "NVIDIA fakecuda GPU %s", hs);
		d->pci_bus = 0x10 + i;
		snprintf(d->busid, sizeof(d->busid), "00000000:%02X:00.0", d->pci_bus);
		d->capacity = cfg->capacity[i];
		atomic_store(&d->used, 0);
	}
	atomic_thread_fence(memory_order_release);
	s->magic = FC_SHM_MAGIC;
}

/* A size variable ("0", "300MiB", "512M", "1G"; at most 1 TiB) into *out,
 * dflt when unset; -1 with a line on stderr naming `what` when malformed. */
static int size_env_load(const char *name, uint64_t dflt, const char *what, uint64_t *out)
{
	const char *v = getenv(name);
	*out = dflt;
	if (v == NULL || *v == 0)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	int shift = end != v && v[0] >= '0' && v[0] <= '9' && errno == 0 ? size_suffix_shift(end) : -1;
	if (shift < 0 || n > ((1ULL << 40) >> shift)) {
		fprintf(stderr,
			"fakecuda: invalid %s=\"%s\": expected %s, "
			"a size such as 0, 300MiB or 512M (unit B, KiB, MiB, GiB or TiB; at most 1 TiB)\n",
			name, v, what);
		return -1;
	}
	*out = (uint64_t)n << shift;
	return 0;
}

int fc_state_path(char *path, size_t len, const struct fc_config *cfg, const char *suffix)
{
	/* FAKECUDA_STATE_DIR: where the state is seen from a process whose
	 * /dev/shm is not the node's (a container with a /dev of its own, the
	 * node's /dev/shm bound elsewhere), as the real driver's device nodes
	 * are bound into containers. */
	const char *dir = getenv("FAKECUDA_STATE_DIR");
	if (dir == NULL || dir[0] == '\0')
		dir = "/dev/shm";
	if (dir[0] != '/' || (size_t)snprintf(path, len, "%s/fakecuda-%s%s", dir, cfg->state, suffix) >= len) {
		fprintf(stderr, "fakecuda: invalid FAKECUDA_STATE_DIR=\"%s\": expected an absolute path\n", dir);
		return -1;
	}
	return 0;
}

int fc_state_attach(const struct fc_config *cfg)
{
	if (size_env_load("FAKECUDA_CTX_BYTES", FC_DEFAULT_CTX_BYTES, "the device memory each context costs",
			  &fc_ctx_bytes) != 0 ||
	    size_env_load("FAKECUDA_MODULE_BYTES", 0, "the device memory each loaded module holds",
			  &fc_module_bytes) != 0)
		return -1;
	const char *g = getenv("FAKECUDA_ALLOC_GRANULE");
	fc_alloc_granule = !(g != NULL && strcmp(g, "0") == 0);
	char path[256];
	if (fc_state_path(path, sizeof(path), cfg, "") != 0)
		return -1;
	/* open an existing state without O_CREAT: with fs.protected_regular, O_CREAT
	 * on another user's file in sticky /dev/shm fails even for root */
	int fd = -1;
	for (int attempt = 0; fd < 0 && attempt < 3; attempt++) {
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno == ENOENT)
			fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
		if (fd < 0 && errno != EEXIST && errno != ENOENT)
			break;
	}
	if (fd < 0) {
		fprintf(stderr, "fakecuda: cannot open state %s: %s\n", path, strerror(errno));
		return -1;
	}
	(void)fchmod(fd, 0666); /* jobs of every user share the node's GPUs; fails harmlessly if not ours */
	int rv = -1;
	void *m = MAP_FAILED;
	if (flock(fd, LOCK_EX) != 0) {
		fprintf(stderr, "fakecuda: cannot lock state %s: %s\n", path, strerror(errno));
		goto out;
	}
	struct stat st;
	if (fstat(fd, &st) != 0)
		goto out_unlock;
	bool fresh = st.st_size == 0;
	if (fresh && ftruncate(fd, (off_t)sizeof(struct fc_shm)) != 0) {
		fprintf(stderr, "fakecuda: cannot size state %s: %s\n", path, strerror(errno));
		goto out_unlock;
	}
	if (!fresh && st.st_size != (off_t)sizeof(struct fc_shm)) {
		fprintf(stderr, "fakecuda: state %s has an unexpected size (remove it to reset)\n", path);
		goto out_unlock;
	}
	m = mmap(NULL, sizeof(struct fc_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		fprintf(stderr, "fakecuda: cannot map state %s: %s\n", path, strerror(errno));
		goto out_unlock;
	}
	struct fc_shm *s = m;
	if (fresh || s->magic == 0) {
		init_shm(s, cfg);
	} else if (s->magic != FC_SHM_MAGIC || s->version != FC_SHM_VERSION || s->ndev == 0 ||
		   s->ndev > FC_MAX_DEVICES) {
		fprintf(stderr, "fakecuda: state %s is not a fakecuda state of version %u (remove it to reset)\n",
			path, FC_SHM_VERSION);
		goto out_unlock;
	} else {
		char want[512];
		canonical_config(cfg, want, sizeof(want));
		if (getenv("FAKECUDA_DEVICES") != NULL && strcmp(want, s->config) != 0)
			fprintf(stderr,
				"fakecuda: state %s already holds devices of %s bytes; ignoring FAKECUDA_DEVICES "
				"(remove the state to change them)\n",
				path, s->config);
		if (getenv("FAKECUDA_MEMORY_LIMITS") != NULL && cfg->memlimits != fc_limits_enabled_in(s))
			fprintf(stderr,
				"fakecuda: state %s was made with memory limits %s; ignoring FAKECUDA_MEMORY_LIMITS "
				"(remove the state to change it)\n",
				path, fc_limits_enabled_in(s) ? "on" : "off");
	}
	fc_shm = s;
	m = MAP_FAILED;
	rv = 0;
out_unlock:
	(void)flock(fd, LOCK_UN);
out:
	if (m != MAP_FAILED)
		munmap(m, sizeof(struct fc_shm));
	close(fd);
	return rv;
}
