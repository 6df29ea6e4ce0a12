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
static struct fc_shm_slot private_slot; /* used only if every shared slot is taken */
FC_HIDDEN _Atomic int fc_released;
FC_HIDDEN uint64_t fc_ctx_bytes = FC_DEFAULT_CTX_BYTES;
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

static void init_shm(struct fc_shm *s, const struct fc_config *cfg)
{
	s->version = FC_SHM_VERSION;
	s->ndev = cfg->ndev;
	s->nslots = FC_SHM_SLOTS;
	canonical_config(cfg, s->config, sizeof(s->config));
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

/* FAKECUDA_CTX_BYTES: a size ("0", "300MiB", "512M", "1G"); at most 1 TiB. */
static int ctx_cost_load(void)
{
	const char *v = getenv("FAKECUDA_CTX_BYTES");
	fc_ctx_bytes = FC_DEFAULT_CTX_BYTES;
	if (v == NULL || *v == 0)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	int shift = end != v && v[0] >= '0' && v[0] <= '9' && errno == 0 ? size_suffix_shift(end) : -1;
	if (shift < 0 || n > ((1ULL << 40) >> shift)) {
		fprintf(stderr,
			"fakecuda: invalid FAKECUDA_CTX_BYTES=\"%s\": expected the device memory each context costs, "
			"a size such as 0, 300MiB or 512M (unit B, KiB, MiB, GiB or TiB; at most 1 TiB)\n",
			v);
		return -1;
	}
	fc_ctx_bytes = (uint64_t)n << shift;
	return 0;
}

uint64_t fc_ctx_charge(unsigned phys)
{
	uint64_t n = fc_ctx_bytes;
	if (n == 0)
		return 0;
	return fc_charge(phys, n) ? n : UINT64_MAX;
}

void fc_ctx_uncharge(unsigned phys, uint64_t bytes)
{
	if (bytes != 0 && bytes != UINT64_MAX)
		fc_uncharge(phys, bytes);
}

int fc_state_attach(const struct fc_config *cfg)
{
	if (ctx_cost_load() != 0)
		return -1;
	char path[256];
	snprintf(path, sizeof(path), "/dev/shm/fakecuda-%s", cfg->state);
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

/* /proc/<pid>/stat: state (field 3) and starttime (field 22). 0, or -1 if gone. */
static int proc_stat(pid_t pid, char *state, uint64_t *starttime)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return -1;
	p += 2;
	*state = *p;
	/* p is at field 3; advance to field 22 */
	for (int f = 3; f < 22; f++) {
		p = strchr(p, ' ');
		if (p == NULL)
			return -1;
		p++;
	}
	*starttime = strtoull(p, NULL, 10);
	return 0;
}

/* The slots in use are below this index. */
static unsigned slot_hwm(void)
{
	unsigned n = atomic_load_explicit(&fc_shm->slot_hwm, memory_order_acquire);
	return n < FC_SHM_SLOTS ? n : FC_SHM_SLOTS;
}

static void slot_hwm_raise(unsigned n)
{
	unsigned cur = atomic_load_explicit(&fc_shm->slot_hwm, memory_order_relaxed);
	while (cur < n && !atomic_compare_exchange_weak_explicit(&fc_shm->slot_hwm, &cur, n, memory_order_release,
								 memory_order_relaxed))
		;
}

/* The calling thread holds the slot's mutex until the process releases the
 * slot or dies (the kernel marks it then). -1 when it cannot (the slot's
 * owner is then checked through /proc). */
static int slot_hold(struct fc_shm_slot *s)
{
	pthread_mutexattr_t a;
	int rv = -1;
	if (pthread_mutexattr_init(&a) != 0)
		return -1;
	if (pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0 &&
	    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0 && pthread_mutex_init(&s->alive, &a) == 0 &&
	    pthread_mutex_lock(&s->alive) == 0)
		rv = 0;
	pthread_mutexattr_destroy(&a);
	return rv;
}

/* The word of the slot's mutex: the owner thread's id, with FUTEX_OWNER_DIED
 * once the kernel saw that thread die (glibc's pthread_mutex_t layout). */
static unsigned slot_lock_word(struct fc_shm_slot *s)
{
	return (unsigned)__atomic_load_n(&s->alive.__data.__lock, __ATOMIC_ACQUIRE);
}

/* Give back what a slot this process has claimed (pid = FC_PID_CLAIMED)
 * holds, and free the slot. Returns the bytes given back. */
static uint64_t slot_give_back(struct fc_shm_slot *s)
{
	uint64_t total = 0;
	for (unsigned d = 0; d < fc_shm->ndev; d++) {
		uint64_t u = atomic_exchange(&s->used[d], 0);
		if (u) {
			fc_sub_saturating(&fc_shm->dev[d].used, u);
			total += u;
		}
	}
	atomic_store(&s->ctxmask, 0);
	atomic_store(&s->starttime, 0);
	atomic_store_explicit(&s->pid, 0, memory_order_release);
	return total;
}

/* A slot with our pid and start time belongs to the program this process
 * ran before exec: one image registers once, and exec frees the device
 * memory of the old image on the real driver. Give that memory back. */
static void release_previous_image(pid_t pid, uint64_t start)
{
	if (start == 0)
		return;
	unsigned hwm = slot_hwm();
	for (unsigned i = 0; i < hwm; i++) {
		struct fc_shm_slot *s = &fc_shm->slot[i];
		uint32_t p = atomic_load_explicit(&s->pid, memory_order_acquire);
		if (p != (uint32_t)pid || atomic_load(&s->starttime) != start)
			continue;
		if (atomic_compare_exchange_strong(&s->pid, &p, FC_PID_CLAIMED))
			(void)slot_give_back(s);
	}
}

void fc_state_register_self(void)
{
	pid_t pid = getpid();
	char state;
	uint64_t start = 0;
	(void)proc_stat(pid, &state, &start);
	release_previous_image(pid, start);
	for (int attempt = 0; attempt < 2; attempt++) {
		for (unsigned i = 0; i < FC_SHM_SLOTS; i++) {
			struct fc_shm_slot *s = &fc_shm->slot[i];
			uint32_t expect = 0;
			if (atomic_load_explicit(&s->pid, memory_order_relaxed) != 0)
				continue;
			if (!atomic_compare_exchange_strong(&s->pid, &expect, FC_PID_CLAIMED))
				continue;
			for (unsigned d = 0; d < FC_MAX_DEVICES; d++)
				atomic_store(&s->used[d], 0);
			atomic_store(&s->ctxmask, 0);
			atomic_store(&s->starttime, start);
			if (slot_hold(s) != 0)
				memset(&s->alive, 0, sizeof(s->alive)); /* word 0: checked through /proc */
			slot_hwm_raise(i + 1);
			atomic_store(&s->pid, (uint32_t)pid);
			fc_self_slot = s;
			return;
		}
		fc_state_sweep();
	}
	fprintf(stderr, "fakecuda: all %u process slots of the state are taken; this process's usage "
			"will not be listed by NVML\n", FC_SHM_SLOTS);
	fc_self_slot = &private_slot;
}

static bool slot_owner_dead(struct fc_shm_slot *s, uint32_t pid)
{
	unsigned w = slot_lock_word(s);
	if (w != 0 && !(w & FUTEX_OWNER_DIED))
		return false; /* the thread that took the slot is alive: so is its process */
	char state;
	uint64_t start;
	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return true;
	if (proc_stat((pid_t)pid, &state, &start) != 0)
		return true; /* /proc says it is gone (or a foreign pid namespace; kill said it exists) */
	if (state == 'Z' || state == 'X')
		return true;
	uint64_t want = atomic_load(&s->starttime);
	return want != 0 && start != want; /* the pid was reused */
}

uint64_t fc_state_sweep(void)
{
	uint64_t total = 0;
	if (fc_shm == NULL)
		return 0;
	unsigned hwm = slot_hwm();
	for (unsigned i = 0; i < hwm; i++) {
		struct fc_shm_slot *s = &fc_shm->slot[i];
		uint32_t pid = atomic_load_explicit(&s->pid, memory_order_acquire);
		if (pid == 0 || pid == FC_PID_CLAIMED || s == fc_self_slot)
			continue;
		if (!slot_owner_dead(s, pid))
			continue;
		if (!atomic_compare_exchange_strong(&s->pid, &pid, FC_PID_CLAIMED))
			continue;
		total += slot_give_back(s);
		if (total == 0)
			total = 1; /* a slot was freed even if it held no memory */
	}
	return total;
}

void fc_state_release_self(void)
{
	struct fc_shm_slot *s = fc_self_slot;
	if (fc_shm == NULL || s == NULL || s == &fc_fork_slot)
		return;
	if (s != &private_slot && atomic_load(&s->pid) != (uint32_t)getpid())
		return;
	atomic_store(&fc_released, 1);
	for (unsigned d = 0; d < fc_shm->ndev; d++) {
		uint64_t u = atomic_exchange(&s->used[d], 0);
		if (u)
			fc_sub_saturating(&fc_shm->dev[d].used, u);
	}
	if (s == &private_slot)
		return;
	atomic_store(&s->ctxmask, 0);
	/* Only the thread that took the slot can let go of its mutex (and so
	 * take it off its robust list). Called from another thread (exit()
	 * on a thread other than the one that initialised CUDA), the slot,
	 * empty now, stays this process's until the kernel marks it dead. */
	if (slot_lock_word(s) != 0 && pthread_mutex_unlock(&s->alive) != 0)
		return;
	atomic_store(&s->starttime, 0);
	atomic_store_explicit(&s->pid, 0, memory_order_release);
}

/* A storm of failing allocations sweeps at most once per millisecond. */
uint64_t fc_state_sweep_limited(void)
{
	static _Atomic uint64_t last;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	uint64_t prev = atomic_load_explicit(&last, memory_order_relaxed);
	if (prev != 0 && now - prev < 1000000u)
		return 0;
	if (!atomic_compare_exchange_strong(&last, &prev, now))
		return 0; /* another thread is sweeping */
	return fc_state_sweep();
}
