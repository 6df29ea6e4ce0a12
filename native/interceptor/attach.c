/*
 * Attach: at the first hooked call, ask gpusliced for the ledger of this
 * process's session. gpusliced decides the session from the process's pid
 * (its Slurm job) and uses GPUSLICE_SESSION only outside Slurm; with no
 * GPUSLICE_SESSION the request names none. A process that belongs to no
 * session (answer "no session"), or on a node without gpusliced (no
 * socket), runs unmanaged: the library is inert. Otherwise the reply is
 * the session's ledger (docs/protocol.md: ATTACH ->
 * ATTACH_OK + [limits fd O_RDONLY, counters fd O_RDWR] over SCM_RIGHTS),
 * check everything, map it and publish GS_ST_ACTIVE. Every malformed,
 * short or oversized reply is an attach failure: the process then fails
 * closed (charged allocations return CUDA_ERROR_OUT_OF_MEMORY) after one
 * line on stderr, and retries at most once per second from the
 * allocation path.
 */
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gs.h"
#include "gate.h"
#include "ipc.h"
#include "notice.h"

#define GS_DEFAULT_SOCK "/run/gpuslice/ipc.sock"
#define GS_MAX_SLOTS 65536u
#define GS_ATTACH_WINDOW_NS 2000000000ll /* keep trying this long at first */
#define GS_RETRY_SLEEP_NS 50000000l
#define GS_RETRY_PERIOD_NS 1000000000ll /* later retries: at most this often */

struct gs_global gs;
__thread struct gs_tls gs_tls GS_TLS_MODEL = {.dev_last = GS_DEV_NONE};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int session_cfg = -1; /* -1 unknown, 0 inert, 1 session named, 2 none named: ask */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char token[GS_MAX_TOKEN + 1];
static char session_env[GS_SESSION_LEN + 64];
static int env_error; /* the environment itself is unusable (reason below) */
static char env_reason[128];
static int64_t last_try_ns;
static int atfork_done;
/* The ATTACH the library's constructor sent, its answer not read yet (-1:
 * none); the first attach reads it (init_mu). */
static int early_fd = -1;
static dev_t early_dev; /* which socket early_fd was: the program may have closed it */
static ino_t early_ino; /* and opened something else under that number */

/* ---- environment (read once per process, never on the hot path) ---- */

static void read_env(void)
{
	const char *s = getenv("GPUSLICE_SESSION");
	const char *d = getenv("GPUSLICE_DEBUG");
	gs_debug_on = d != NULL && d[0] != '\0' && strcmp(d, "0") != 0;
	const char *pl = getenv("GPUSLICE_PLAIN_PATH");
	gs_plain_path = pl != NULL && pl[0] != '\0' && strcmp(pl, "0") != 0;
	env_error = 0;
	int named = s != NULL && s[0] != '\0';
	snprintf(session_env, sizeof(session_env), "%s", named ? s : "");
	if (named && strlen(s) >= GS_SESSION_LEN) {
		env_error = 1;
		snprintf(env_reason, sizeof(env_reason), "session name longer than %d bytes",
			 GS_SESSION_LEN - 1);
	}
	const char *p = getenv("GPUSLICE_IPC_SOCK");
	if (p == NULL || p[0] == '\0')
		p = GS_DEFAULT_SOCK;
	if (strlen(p) >= sizeof(sock_path)) {
		env_error = 1;
		snprintf(env_reason, sizeof(env_reason), "socket path longer than %zu bytes",
			 sizeof(sock_path) - 1);
		snprintf(sock_path, sizeof(sock_path), "%.*s", (int)sizeof(sock_path) - 1, p);
	} else {
		snprintf(sock_path, sizeof(sock_path), "%s", p);
	}
	const char *t = getenv("GPUSLICE_IPC_TOKEN");
	token[0] = '\0';
	if (t != NULL) {
		if (strlen(t) > GS_MAX_TOKEN) {
			env_error = 1;
			snprintf(env_reason, sizeof(env_reason), "GPUSLICE_IPC_TOKEN longer than %d bytes",
				 GS_MAX_TOKEN);
		} else {
			snprintf(token, sizeof(token), "%s", t);
		}
	}
	__atomic_store_n(&session_cfg, named ? 1 : 2, __ATOMIC_RELEASE);
}

/* 1 when this process is managed: a session is named, or gpusliced
 * (asked at the first lookup of a CUDA or NVML name) put it in one, since
 * gpusliced decides the session from the pid. An inert process gets the
 * real definitions from dlsym and cuGetProcAddress. */
int gs_session_configured(void)
{
	int c = __atomic_load_n(&session_cfg, __ATOMIC_ACQUIRE);
	if (c < 0) {
		pthread_mutex_lock(&init_mu);
		if (session_cfg < 0)
			read_env();
		c = session_cfg;
		pthread_mutex_unlock(&init_mu);
	}
	if (c == 2)
		return gs_state() != GS_ST_INERT;
	return c;
}

/* ---- ledger mapping ---- */

static int map_ledger(const struct gs_attach_reply *rep, struct gs_attach_err *err)
{
	struct stat st;
	void *lim = MAP_FAILED, *ctr = MAP_FAILED;
	size_t ctr_len = 0;

	if (rep->ngpus < 1 || rep->ngpus > GS_MAX_GPUS) {
		gs_attach_fail(err, 0, "reply names %u GPUs (want 1..%d)", rep->ngpus, GS_MAX_GPUS);
		goto bad;
	}
	if (fstat(rep->limfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != GS_LIMITS_SIZE) {
		gs_attach_fail(err, 0, "limits file is not a %d-byte regular file", GS_LIMITS_SIZE);
		goto bad;
	}
	lim = mmap(NULL, GS_LIMITS_SIZE, PROT_READ, MAP_SHARED, rep->limfd, 0);
	if (lim == MAP_FAILED) {
		gs_attach_fail(err, 0, "mmap limits: %s", strerror(errno));
		goto bad;
	}
	const struct gs_limits *l = lim;
	if (l->magic != GS_LIMITS_MAGIC || l->version != GS_LEDGER_VERSION) {
		gs_attach_fail(err, 0, "limits file has bad magic/version");
		goto bad;
	}
	if (l->ngpus != rep->ngpus) {
		gs_attach_fail(err, 0, "limits file names %u GPUs, reply %u", l->ngpus, rep->ngpus);
		goto bad;
	}
	/* The session is the daemon's choice (the process's Slurm job), which
	 * may differ from the one the environment names. */
	if (strnlen(l->session, GS_SESSION_LEN) == GS_SESSION_LEN || l->session[0] == '\0') {
		gs_attach_fail(err, 0, "limits file names no session");
		goto bad;
	}
	if (fstat(rep->ctrfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < GS_COUNTERS_HDR_SIZE + GS_SLOT_SIZE ||
	    st.st_size > GS_COUNTERS_HDR_SIZE + (off_t)GS_MAX_SLOTS * GS_SLOT_SIZE) {
		gs_attach_fail(err, 0, "counters file has a bad size");
		goto bad;
	}
	ctr_len = (size_t)st.st_size;
	ctr = mmap(NULL, ctr_len, PROT_READ | PROT_WRITE, MAP_SHARED, rep->ctrfd, 0);
	if (ctr == MAP_FAILED) {
		gs_attach_fail(err, 0, "mmap counters: %s", strerror(errno));
		goto bad;
	}
	struct gs_counters_hdr *c = ctr;
	if (c->magic != GS_COUNTERS_MAGIC || c->version != GS_LEDGER_VERSION || c->ngpus != l->ngpus ||
	    c->nslots < 1 || c->nslots > GS_MAX_SLOTS ||
	    (size_t)GS_COUNTERS_HDR_SIZE + (size_t)c->nslots * GS_SLOT_SIZE != ctr_len) {
		gs_attach_fail(err, 0, "counters file header does not match");
		goto bad;
	}
	if (rep->slot >= c->nslots) {
		gs_attach_fail(err, 0, "reply slot %u out of range (%u slots)", rep->slot, c->nslots);
		goto bad;
	}
	if (gs_tab_init() < 0) {
		gs_attach_fail(err, 0, "cannot map the allocation table: %s", strerror(errno));
		goto bad;
	}
	gs.lim = l;
	gs.ctr = c;
	gs.slot = GS_SLOT_AT(c, rep->slot);
	gs.epoch++; /* every thread picks a stripe of the new slot (gs_own) */
	gs.ngpus = l->ngpus;
	gs.slot_index = rep->slot;
	gs.ctr_len = ctr_len;
	memcpy(gs.session, l->session, GS_SESSION_LEN);
	for (int i = 0; i < GS_MAX_ORDINALS; i++)
		gs.devmap[i] = GS_MAP_UNKNOWN;
	gs_credit_attach();
	return 0;
bad:
	if (lim != MAP_FAILED)
		munmap(lim, GS_LIMITS_SIZE);
	if (ctr != MAP_FAILED)
		munmap(ctr, ctr_len);
	return -1;
}

/* Take the constructor's ATTACH socket, -1 when there is none or when its
 * number no longer names it (a program that closes every descriptor at
 * start may have opened something else there: never read or close that). */
static int early_socket(void)
{
	int s = early_fd;
	early_fd = -1;
	struct stat st;
	if (s < 0 || fstat(s, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_dev != early_dev || st.st_ino != early_ino)
		return -1;
	return s;
}

/* One attach: the answer to the constructor's ATTACH when there is one. */
static int attach_once(struct gs_attach_err *err)
{
	struct gs_attach_reply rep;
	if (env_error) {
		gs_attach_fail(err, 0, "%s", env_reason);
		return -1;
	}
	int s = early_socket();
	if (s < 0)
		s = gs_ipc_attach_send(sock_path, session_env, token, GS_ATTACH_COMPUTE, 0, err);
	if (s < 0)
		return -1;
	if (gs_ipc_attach_recv(s, &rep, err) < 0) {
		if (err->code != GS_IPC_CODE_BAD_REQUEST)
			return -1;
		/* a gpusliced from before the compute page refuses the flag:
		 * attach without it (launches are then never gated) */
		s = gs_ipc_attach_send(sock_path, session_env, token, 0, 0, err);
		if (s < 0 || gs_ipc_attach_recv(s, &rep, err) < 0)
			return -1;
	}
	int rv = map_ledger(&rep, err);
	close(rep.limfd);
	close(rep.ctrfd);
	if (rv == 0)
		gs_gate_attach(rep.cfd, rep.cslot, rep.cgen);
	if (rep.cfd >= 0)
		close(rep.cfd);
	return rv;
}

static void report_failure(const struct gs_attach_err *err)
{
	gs_log("cannot attach to session '%s' at %s: %s; GPU allocations will fail", session_env,
	       sock_path, err->msg);
}

/* A process that named no session runs unmanaged when gpusliced says it
 * belongs to none, or when no gpusliced answers on this node (no socket,
 * or nobody listening: the audit is the backstop while it restarts). */
static int unmanaged(const struct gs_attach_err *err)
{
	return err->code == GS_IPC_CODE_NO_SESSION || err->conn_errno != 0;
}

/* ---- fork ---- */

static void atfork_prepare(void) { pthread_mutex_lock(&init_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&init_mu); }

/* The child is a new process for the daemon: drop the parent's ledger view
 * and allocations; the child attaches itself at its first hooked call. */
static void atfork_child(void)
{
	pthread_mutex_init(&init_mu, NULL);
	if (gs.lim != NULL)
		munmap((void *)gs.lim, GS_LIMITS_SIZE);
	if (gs.ctr != NULL)
		munmap(gs.ctr, gs.ctr_len);
	gs.lim = NULL;
	gs.ctr = NULL;
	gs.slot = NULL;
	gs.ngpus = 0;
	gs.epoch++; /* the parent's stripe is gone: no thread uses it (hooks_ptr.c) */
	gs_tls.st = NULL;
	gs_tls.dev_last = GS_DEV_NONE;
	gs_tab_drop(); /* drops this thread's front too */
	gs_kept_drop();
	gs_notice_fork();
	int e = early_socket(); /* the parent's ATTACH: its answer is the parent's */
	if (e >= 0)
		close(e);
	gs_tls_hot();
	session_cfg = -1;
	last_try_ns = 0;
	atomic_store_explicit(&gs.state, GS_ST_UNINIT, memory_order_release);
}

/* Once per process, with init_mu held. */
static void register_atfork(void)
{
	if (!atfork_done) {
		pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		atfork_done = 1;
	}
}

/* ---- an early ATTACH ---- */

static int names_cuda(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	const char *slash = info->dlpi_name != NULL ? strrchr(info->dlpi_name, '/') : NULL;
	const char *name = slash != NULL ? slash + 1 : info->dlpi_name;
	return name != NULL && (strncmp(name, "libcuda.so", 10) == 0 || strncmp(name, "libcudart.so", 12) == 0);
}

/*
 * A process that names its session and starts with the CUDA driver or
 * runtime loaded (linked against them: it will use them) sends its ATTACH
 * from here, without waiting, and reads the answer at its first hooked
 * call (attach_once): gpusliced answers while the program starts up, and
 * the driver's own start-up. Anything else (no session named, CUDA loaded
 * later with dlopen or linked statically, a full backlog, no daemon)
 * attaches at the first hooked call as before.
 */
__attribute__((constructor)) static void attach_early(void)
{
	pthread_mutex_lock(&init_mu);
	if (session_cfg < 0)
		read_env();
	if (session_cfg == 1 && !env_error && early_fd < 0 &&
	    atomic_load_explicit(&gs.state, memory_order_acquire) == GS_ST_UNINIT && dl_iterate_phdr(names_cuda, NULL)) {
		struct gs_attach_err err = {.msg = "", .retry = 0};
		register_atfork(); /* a child forked before the first call must not read the answer */
		early_fd = gs_ipc_attach_send(sock_path, session_env, token, GS_ATTACH_COMPUTE, 1, &err);
		struct stat st;
		if (early_fd >= 0 && fstat(early_fd, &st) == 0) {
			early_dev = st.st_dev;
			early_ino = st.st_ino;
		} else if (early_fd >= 0) {
			close(early_fd);
			early_fd = -1;
		}
		if (early_fd < 0)
			gs_debug("early attach not sent: %s", err.msg);
	}
	pthread_mutex_unlock(&init_mu);
}

/* ---- state machine ---- */

int gs_init_slow(void)
{
	pthread_mutex_lock(&init_mu);
	int s = atomic_load_explicit(&gs.state, memory_order_acquire);
	if (s != GS_ST_UNINIT)
		goto out;
	register_atfork();
	if (session_cfg < 0)
		read_env();
	if (!session_cfg) {
		s = GS_ST_INERT;
		goto publish;
	}
	int64_t t0 = gs_mono_ns(), deadline = t0 + GS_ATTACH_WINDOW_NS;
	struct gs_attach_err err = {.msg = "", .retry = 0};
	int tries = 0;
	for (;;) {
		tries++;
		if (attach_once(&err) == 0) {
			s = GS_ST_ACTIVE;
			gs_debug("attached to session '%s' at %s: slot %u, %u GPU(s), %lld us, %d tr%s",
				 session_env, sock_path, gs.slot_index, gs.ngpus,
				 (long long)(gs_mono_ns() - t0) / 1000, tries, tries == 1 ? "y" : "ies");
			break;
		}
		if (session_cfg == 2 && unmanaged(&err)) {
			s = GS_ST_INERT; /* says nothing: most processes are in no job */
			goto publish;
		}
		gs_debug("attach attempt %d failed: %s", tries, err.msg);
		if (!err.retry || gs_mono_ns() + GS_RETRY_SLEEP_NS > deadline) {
			s = GS_ST_FAILED;
			report_failure(&err);
			break;
		}
		struct timespec ts = {.tv_sec = 0, .tv_nsec = GS_RETRY_SLEEP_NS};
		nanosleep(&ts, NULL);
	}
	__atomic_store_n(&last_try_ns, gs_mono_ns(), __ATOMIC_RELAXED);
publish:
	atomic_store_explicit(&gs.state, s, memory_order_release);
out:
	pthread_mutex_unlock(&init_mu);
	return s;
}

/* Failed closed: one more attempt, at most once per second, from the
 * allocation path (never the hot path of an attached process). */
int gs_failed_retry(void)
{
	int64_t now = gs_mono_ns();
	if (now - __atomic_load_n(&last_try_ns, __ATOMIC_RELAXED) < GS_RETRY_PERIOD_NS)
		return GS_ST_FAILED;
	if (pthread_mutex_trylock(&init_mu) != 0)
		return atomic_load_explicit(&gs.state, memory_order_acquire);
	int s = atomic_load_explicit(&gs.state, memory_order_acquire);
	if (s == GS_ST_FAILED && now - last_try_ns >= GS_RETRY_PERIOD_NS) {
		struct gs_attach_err err = {.msg = "", .retry = 0};
		if (attach_once(&err) == 0) {
			s = GS_ST_ACTIVE;
			gs_log("attached to session '%s' at %s after an earlier failure; GPU allocations "
			       "are admitted again",
			       session_env, sock_path);
			atomic_store_explicit(&gs.state, s, memory_order_release);
		} else {
			gs_debug("attach retry failed: %s", err.msg);
		}
		__atomic_store_n(&last_try_ns, gs_mono_ns(), __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&init_mu);
	return s;
}

/* ---- short ---- */

/* The driver refused an allocation the quota allowed on ledger GPU g: the
 * GPU is short of memory the scheduler promised (something holds more
 * than its quota without going through this library). gpusliced is told
 * (one SHORT message: it audits at once instead of at its next pass), at
 * most every GS_SHORT_GAP_NS per process. */
#define GS_SHORT_GAP_NS (20ll * 1000 * 1000)

void gs_short(int g)
{
	static int64_t last;
	if (gs.lim != NULL && gs_take_turn(&last, gs_mono_ns(), GS_SHORT_GAP_NS))
		gs_short_send(g);
}

/* One SHORT for ledger GPU g, now (settle.c rate-limits its own). */
int gs_short_send(int g)
{
	if (gs.lim == NULL || g < 0 || (uint32_t)g >= gs.ngpus || sock_path[0] == '\0')
		return -1;
	char uuid[GS_UUID_LEN];
	memcpy(uuid, gs.lim->gpu[g].uuid, sizeof(uuid));
	uuid[sizeof(uuid) - 1] = '\0';
	return gs_ipc_short(sock_path, uuid);
}
