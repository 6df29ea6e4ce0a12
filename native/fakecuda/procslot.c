/*
 * The processes' slots of the node state (state.c maps it): taking one at a
 * process's first use, knowing whether its owner is alive (its robust
 * mutex; /proc only when the mutex says the thread is gone), giving a dead
 * or exiting process's memory back, and the sweeps NVML's listings and a
 * full device run.
 */
#include "fc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct fc_shm_slot private_slot; /* used only if every shared slot is taken */

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
	fc_lim_release_slot((unsigned)(s - fc_shm->slot));
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
			fc_lim_release_slot(i);
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
	if (s != &private_slot)
		fc_lim_release_slot((unsigned)(s - fc_shm->slot));
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
