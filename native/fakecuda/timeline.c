/*
 * Modelled GPU time: one timeline per physical GPU, shared by every process
 * of the node (/dev/shm/fakecuda-<state>@timeline, beside the memory
 * state, made at the first launch, synchronisation or utilisation query).
 *
 * The GPU runs in real time (CLOCK_MONOTONIC ns) but nothing runs: each
 * process's kernels on a GPU queue there in launch order with their
 * modelled durations, and the GPU is a time-sliced machine simulated
 * lazily: whoever looks (a launch, a synchronisation, an event, NVML) first
 * advances the device to the present, giving the GPU to the processes with
 * queued work in turn, one time slice each (a process keeps it while it is
 * the only one with work), so it is busy whenever any work is queued. The
 * time each process ran is exact in the model whatever the CPUs do; a
 * process's share depends only on whether it kept work queued.
 */
#include "timeline_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


_Static_assert(offsetof(struct tl_shm, clock_step_ns) == FC_TL_CLOCK_STEP_OFF, "timeline.h's FC_TL_CLOCK_STEP_OFF");
_Static_assert(sizeof(((struct tl_shm *)0)->pad) + 40 == 4096, "the timeline's header is 4096 bytes");

FC_HIDDEN struct tl_shm *fc_tl;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static int mine[FC_MAX_DEVICES]; /* this process's context index + 1 per device */
static uint64_t my_start;
static pid_t my_pid; /* 0 until the first context (and again in a forked child) */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void tl_after_fork(void)
{
	memset(mine, 0, sizeof(mine));
	my_start = 0;
	my_pid = 0;
}

static void tl_map(void)
{
	struct fc_config cfg;
	if (fc_config_load(&cfg) != 0)
		return;
	char path[256];
	if (fc_state_path(path, sizeof(path), &cfg, "@timeline") != 0)
		return;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0) {
		fprintf(stderr, "fakecuda: cannot open %s: %s; kernels take no GPU time\n", path, strerror(errno));
		return;
	}
	(void)fchmod(fd, 0666);
	struct stat st;
	void *m = MAP_FAILED;
	if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0)
		goto out;
	if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(struct tl_shm)) != 0)
		goto out;
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(struct tl_shm)) {
		fprintf(stderr, "fakecuda: %s has an unexpected size (remove it to reset)\n", path);
		goto out;
	}
	m = mmap(NULL, sizeof(struct tl_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto out;
	struct tl_shm *s = m;
	if (s->magic == 0) {
		struct timespec rt;
		clock_gettime(CLOCK_REALTIME, &rt);
		uint64_t now = mono_ns();
		s->realtime_off = (int64_t)((uint64_t)rt.tv_sec * 1000000000ULL + (uint64_t)rt.tv_nsec - now);
		s->slice_ns = fc_tl_env_ns("FAKECUDA_TIMESLICE_NS", FC_TL_DEFAULT_SLICE_NS);
		s->sample_ns = fc_tl_env_ns("FAKECUDA_NVML_SAMPLE_NS", FC_TL_SAMPLE_NS);
		pthread_mutexattr_t a;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		for (unsigned d = 0; d < FC_MAX_DEVICES; d++) {
			pthread_mutex_init(&s->dev[d].lock, &a);
			s->dev[d].now = s->dev[d].period_start = now;
		}
		pthread_mutexattr_destroy(&a);
		s->version = TL_VERSION;
		s->magic = TL_MAGIC;
	} else if (s->magic != TL_MAGIC || s->version != TL_VERSION) {
		fprintf(stderr, "fakecuda: %s is not a timeline of version %u (remove it to reset)\n", path,
			TL_VERSION);
		munmap(m, sizeof(struct tl_shm));
		goto out;
	}
	fc_tl = s;
	pthread_atfork(NULL, NULL, tl_after_fork);
out:
	(void)flock(fd, LOCK_UN);
	close(fd);
}

struct tl_dev *fc_tl_lock(unsigned phys)
{
	pthread_once(&tl_once, tl_map);
	if (fc_tl == NULL || phys >= FC_MAX_DEVICES)
		return NULL;
	struct tl_dev *d = &fc_tl->dev[phys];
	if (pthread_mutex_lock(&d->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&d->lock); /* a process died inside: the model is still whole */
	return d;
}

void fc_tl_unlock(struct tl_dev *d)
{
	pthread_mutex_unlock(&d->lock);
}

/* Closes the sample period ending at d->now: per-process samples for those
 * that ran in it, the device's busy percent. */
static void close_period(struct tl_dev *d)
{
	uint64_t len = d->now - d->period_start;
	/* the wall clock at the period's end: as it was at the timeline's
	 * creation, plus the time since, plus its steps since (fc_clockstep) */
	int64_t step = atomic_load_explicit(&fc_tl->clock_step_ns, memory_order_relaxed);
	uint64_t t_us = (uint64_t)((int64_t)d->now + fc_tl->realtime_off + step) / 1000;
	for (unsigned i = 0; i < TL_CTX; i++) {
		struct tl_ctx *c = &d->ctx[i];
		if (c->period_busy == 0)
			continue;
		c->samp[c->nsamp % TL_SAMPLES].t_us = t_us;
		c->samp[c->nsamp % TL_SAMPLES].busy_ns = c->period_busy;
		c->nsamp++;
		c->period_busy = 0;
	}
	if (len >= tl_sample_ns())
		d->last_pct = (uint32_t)((d->period_busy * 100 + len / 2) / len);
	d->period_busy = 0;
	d->period_start = d->now;
}

static bool has_work(const struct tl_ctx *c)
{
	return atomic_load_explicit(&c->pid, memory_order_relaxed) != 0 && c->submitted > c->done;
}

/* Forgets a process's context (exit, death): its queued work is gone with
 * it, and so is what it ran in the present sample period. */
static void drop_ctx(struct tl_ctx *c)
{
	atomic_store(&c->pid, 0);
	c->submitted = c->done = 0;
	c->head_left = 0;
}

/* Drops the contexts of processes that are gone. Liveness is the memory
 * state's (procslot.c): a process's slot there is freed by a sweep once it
 * is dead, which a robust lock tells without a system call and which works
 * across pid namespaces (a pid seen from another namespace proves
 * nothing). */
static void reap_dead(struct tl_dev *d, uint64_t now)
{
	if (now - d->last_reap < 1000000ULL || fc_shm == NULL)
		return; /* at most once a millisecond */
	d->last_reap = now;
	fc_state_sweep_limited();
	for (unsigned i = 0; i < TL_CTX; i++) {
		struct tl_ctx *c = &d->ctx[i];
		uint32_t pid = atomic_load_explicit(&c->pid, memory_order_relaxed);
		if (pid == 0 || c->mslot >= FC_SHM_SLOTS)
			continue;
		if (atomic_load_explicit(&fc_shm->slot[c->mslot].pid, memory_order_acquire) != pid)
			drop_ctx(c);
	}
}

/* Runs the GPU from d->now to t. */
static void advance(struct tl_dev *d, uint64_t t)
{
	reap_dead(d, t);
	while (d->now < t) {
		uint64_t limit = d->period_start + tl_sample_ns();
		if (limit > t)
			limit = t;
		struct tl_ctx *c = &d->ctx[d->cur];
		if (!has_work(c) || d->slice_left == 0) {
			unsigned k;
			for (k = 1; k <= TL_CTX && !has_work(&d->ctx[(d->cur + k) % TL_CTX]); k++)
				;
			if (k > TL_CTX) { /* idle */
				if (d->period_busy == 0 && t - d->period_start >= tl_sample_ns()) {
					d->now = t; /* skip idle periods whole */
					close_period(d);
					continue;
				}
				d->now = limit;
				goto boundary;
			}
			d->cur = (d->cur + k) % TL_CTX;
			c = &d->ctx[d->cur];
			d->slice_left = fc_tl->slice_ns;
		}
		uint64_t run = c->head_left;
		if (run > d->slice_left)
			run = d->slice_left;
		if (run > limit - d->now)
			run = limit - d->now;
		c->head_left -= run;
		d->slice_left -= run;
		d->now += run;
		c->busy += run;
		c->period_busy += run;
		d->busy += run;
		d->period_busy += run;
		if (c->head_left == 0) {
			c->done++;
			c->end[c->done % TL_RING] = d->now;
			if (c->done < c->submitted)
				c->head_left = c->dur[(c->done + 1) % TL_RING];
		}
	boundary:
		if (d->now - d->period_start >= tl_sample_ns())
			close_period(d);
	}
}

void fc_tl_advance_now(struct tl_dev *d)
{
	advance(d, mono_ns());
}

/* This process's context on d (taken on first use); NULL when all are taken. */
/* Whether context c is this process's (it may have been dropped). */
static bool is_mine(const struct tl_ctx *c)
{
	return atomic_load_explicit(&c->pid, memory_order_relaxed) == (uint32_t)my_pid && c->start == my_start;
}

static struct tl_ctx *my_ctx(struct tl_dev *d, unsigned phys)
{
	if (mine[phys] && is_mine(&d->ctx[mine[phys] - 1]))
		return &d->ctx[mine[phys] - 1];
	mine[phys] = 0;
	if (my_pid == 0) {
		my_pid = getpid();
		my_start = fc_tl_proc_start(my_pid);
	}
	for (unsigned i = 0; i < TL_CTX; i++) {
		struct tl_ctx *c = &d->ctx[i];
		if (atomic_load_explicit(&c->pid, memory_order_relaxed) != 0)
			continue;
		memset((char *)c + sizeof(c->pid), 0, offsetof(struct tl_ctx, dur) - sizeof(c->pid));
		c->start = my_start;
		c->mslot = UINT32_MAX;
		if (fc_shm != NULL && fc_slot() >= fc_shm->slot && fc_slot() < fc_shm->slot + FC_SHM_SLOTS)
			c->mslot = (uint32_t)(fc_slot() - fc_shm->slot);
		atomic_store(&c->pid, (uint32_t)my_pid);
		mine[phys] = (int)i + 1;
		return c;
	}
	static _Atomic int warned;
	if (!atomic_exchange(&warned, 1))
		fprintf(stderr, "fakecuda: %d processes have work on one GPU; this one's kernels take no time\n",
			TL_CTX);
	return NULL;
}

static void nap(uint64_t ns)
{
	if (ns < 20000)
		ns = 20000;
	if (ns > 1000000)
		ns = 1000000;
	struct timespec ts = {0, (long)ns};
	nanosleep(&ts, NULL);
}

uint64_t fc_tl_submit(unsigned phys, uint64_t ns)
{
	for (;;) {
		struct tl_dev *d = fc_tl_lock(phys);
		if (d == NULL)
			return 0;
		advance(d, mono_ns());
		struct tl_ctx *c = my_ctx(d, phys);
		if (c == NULL) {
			fc_tl_unlock(d);
			return 0;
		}
		if (c->submitted - c->done < TL_RING) {
			uint64_t seq = ++c->submitted;
			c->dur[seq % TL_RING] = ns ? ns : 1;
			if (seq == c->done + 1)
				c->head_left = c->dur[seq % TL_RING];
			fc_tl_unlock(d);
			return seq;
		}
		uint64_t left = c->head_left;
		fc_tl_unlock(d);
		nap(left);
	}
}

uint64_t fc_tl_last(unsigned phys)
{
	struct tl_dev *d = phys < FC_MAX_DEVICES && mine[phys] ? fc_tl_lock(phys) : NULL;
	if (d == NULL)
		return 0;
	uint64_t s = is_mine(&d->ctx[mine[phys] - 1]) ? d->ctx[mine[phys] - 1].submitted : 0;
	fc_tl_unlock(d);
	return s;
}

/* Whether seq is done; *left: ns of this process's own work still ahead of it. */
static bool check(unsigned phys, uint64_t seq, uint64_t *left)
{
	if (seq == 0 || phys >= FC_MAX_DEVICES || !mine[phys])
		return true;
	struct tl_dev *d = fc_tl_lock(phys);
	if (d == NULL)
		return true;
	advance(d, mono_ns());
	struct tl_ctx *c = &d->ctx[mine[phys] - 1];
	/* a context taken from this process (its work dropped) has nothing pending */
	bool done = !is_mine(c) || c->done >= seq || c->submitted < seq;
	if (!done && left != NULL) {
		*left = c->head_left;
		for (uint64_t s = c->done + 2; s <= seq; s++)
			*left += c->dur[s % TL_RING];
	}
	fc_tl_unlock(d);
	return done;
}

bool fc_tl_done(unsigned phys, uint64_t seq)
{
	return check(phys, seq, NULL);
}

void fc_tl_wait(unsigned phys, uint64_t seq)
{
	uint64_t left = 0;
	while (!check(phys, seq, &left))
		nap(left);
}

uint64_t fc_tl_end_time(unsigned phys, uint64_t seq)
{
	struct tl_dev *d = fc_tl_lock(phys);
	if (d == NULL)
		return mono_ns();
	advance(d, mono_ns());
	uint64_t t = d->now;
	if (seq != 0 && mine[phys] && is_mine(&d->ctx[mine[phys] - 1])) {
		struct tl_ctx *c = &d->ctx[mine[phys] - 1];
		if (seq <= c->done && c->done - seq < TL_RING)
			t = c->end[seq % TL_RING];
	}
	fc_tl_unlock(d);
	return t;
}

__attribute__((destructor)) static void tl_release_self(void)
{
	for (unsigned p = 0; p < FC_MAX_DEVICES; p++) {
		if (!mine[p])
			continue;
		struct tl_dev *d = fc_tl_lock(p);
		if (d == NULL)
			continue;
		advance(d, mono_ns());
		if (is_mine(&d->ctx[mine[p] - 1]))
			drop_ctx(&d->ctx[mine[p] - 1]);
		mine[p] = 0;
		fc_tl_unlock(d);
	}
}
