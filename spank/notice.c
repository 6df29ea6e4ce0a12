/*
 * What users are told (docs/user-guide.md): the interceptor's line
 * when the quota refuses an allocation, and at the end of each step with a
 * session, on the step's own stderr (srun's terminal, the batch job's
 * output file), what the job used and what to ask next time.
 *
 * In the task (slurm_spank_task_init, as the user, just before exec):
 * GPUSLICE_GPU_MEM is the --gpu-mem the job asked for, as written, for
 * the refusal line; GPUSLICE_NOTICE keeps what both the cluster (notice=)
 * and the user (GPUSLICE_NOTICE in the job's environment) want.
 *
 * The end-of-step lines are written by slurmstepd, which has no
 * descriptor of the step's output of its own: Slurm hands a task its
 * stdout and stderr (pipes to srun, or the batch job's output file) and
 * closes its own copies once the tasks are started. So slurmstepd opens a
 * socket pair before the tasks are forked (slurm_spank_user_init), the
 * step's first task on the node sends its stderr over it (SCM_RIGHTS)
 * before exec, and once every task of the node has exited
 * (slurm_spank_task_exit) slurmstepd asks gpusliced for the session,
 * writes the lines there and closes it, before Slurm waits for the step's
 * output to drain. Both ends are close-on-exec: the user's program never
 * sees them.
 */
#include "gs.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "summary.h"

#define GS_NOTICE_ENV "GPUSLICE_NOTICE"
#define GS_GPU_MEM_ENV "GPUSLICE_GPU_MEM"

static int pair[2] = {-1, -1}; /* slurmstepd's end, the tasks' end */
static int exited;             /* tasks of this node that have exited */

/* What a value of GPUSLICE_NOTICE asks for (GS_NOTICE_*). */
static int user_notice(const char *v)
{
	static const char *const off[] = {"0", "off", "no", "none", "false"};
	size_t i;

	for (i = 0; i < sizeof(off) / sizeof(off[0]); i++)
		if (strcasecmp(v, off[i]) == 0)
			return 0;
	if (strcasecmp(v, "refusal") == 0)
		return GS_NOTICE_REFUSAL;
	if (strcasecmp(v, "summary") == 0)
		return GS_NOTICE_SUMMARY;
	return GS_NOTICE_REFUSAL | GS_NOTICE_SUMMARY;
}

/* What the cluster and the job's user both want told. */
static int wanted(spank_t sp)
{
	char v[32];

	if (spank_getenv(sp, GS_NOTICE_ENV, v, sizeof(v)) != ESPANK_SUCCESS)
		return gs_config.notice;
	return gs_config.notice & user_notice(v);
}

int gs_notice_user_init(spank_t sp)
{
	(void)sp;
	if (!(gs_config.notice & GS_NOTICE_SUMMARY) || pair[0] >= 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
		gs_debug("no end-of-step lines: socketpair: %s", strerror(errno));
		pair[0] = pair[1] = -1;
	}
	return 0;
}

/* The --gpu-mem of the job as its user wrote it, "default" for the
 * cluster's default= quota, else its quota in bytes written as a size. */
static void set_gpu_mem(spank_t sp, const char *id)
{
	char v[64], opt[64];
	const char *val = gs_option_value();
	spank_err_t rc;

	if (!val && spank_getenv(sp, GS_OPTION_ENV_VAR, opt, sizeof(opt)) == ESPANK_SUCCESS && opt[0])
		val = opt;
	if (!val && spank_getenv(sp, GS_DEFAULT_ENV_VAR, v, sizeof(v)) == ESPANK_SUCCESS && strcmp(v, "1") == 0)
		val = "default";
	if (!val && spank_getenv(sp, GS_JOB_ENV_VAR, v, sizeof(v)) == ESPANK_SUCCESS) {
		uint64_t b = strtoull(v, NULL, 10);
		if (b != 0) {
			gs_format_size(b, opt, sizeof(opt));
			val = opt;
		}
	}
	if (!val)
		return;
	rc = spank_setenv(sp, GS_GPU_MEM_ENV, val, 1);
	if (rc != ESPANK_SUCCESS)
		gs_debug("job %s: cannot set %s: %s", id, GS_GPU_MEM_ENV, spank_strerror(rc));
}

/* The step's first task on the node hands its stderr to slurmstepd. */
static void send_stderr(spank_t sp, const char *id)
{
	int task = -1;
	char cbuf[CMSG_SPACE(sizeof(int))];
	char byte = 'e';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	int fd = STDERR_FILENO;

	if (pair[1] < 0 || spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task != 0)
		return;
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	if (sendmsg(pair[1], &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		gs_debug("job %s: no end-of-step lines: %s", id, strerror(errno));
}

void gs_notice_task(spank_t sp, const char *id)
{
	char v[32];
	int want = wanted(sp);
	spank_err_t rc;

	set_gpu_mem(sp, id);
	if (!(want & GS_NOTICE_REFUSAL)) {
		const char *val = want & GS_NOTICE_SUMMARY ? "summary" : "off";
		if (spank_getenv(sp, GS_NOTICE_ENV, v, sizeof(v)) != ESPANK_SUCCESS || strcmp(v, val) != 0) {
			rc = spank_setenv(sp, GS_NOTICE_ENV, val, 1);
			if (rc != ESPANK_SUCCESS)
				gs_debug("job %s: cannot set %s: %s", id, GS_NOTICE_ENV, spank_strerror(rc));
		}
	}
	if (want & GS_NOTICE_SUMMARY)
		send_stderr(sp, id);
}

void gs_notice_task_done(void)
{
	/* the task's copies: its program gets neither end */
	if (pair[0] >= 0)
		close(pair[0]);
	if (pair[1] >= 0)
		close(pair[1]);
	pair[0] = pair[1] = -1;
}

/* The stderr the step's first task sent, or -1. */
static int received(void)
{
	char cbuf[CMSG_SPACE(sizeof(int))], byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	int fd = -1;

	if (pair[0] < 0 || recvmsg(pair[0], &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) < 1)
		return -1;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

static void step_name(spank_t sp, char *buf, size_t len)
{
	uint32_t step = 0;

	if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		snprintf(buf, len, "step");
	else if (step == SLURM_BATCH_SCRIPT)
		snprintf(buf, len, "batch step");
	else if (step == SLURM_INTERACTIVE_STEP)
		snprintf(buf, len, "interactive step");
	else
		snprintf(buf, len, "step %u", step);
}

static void node_name(spank_t sp, char *buf, size_t len)
{
	if (spank_getenv(sp, "SLURMD_NODENAME", buf, (int)len) == ESPANK_SUCCESS && buf[0])
		return;
	if (gethostname(buf, len) != 0)
		snprintf(buf, len, "this node");
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
}

/* Write all of buf to fd, waiting at most a second for room. */
static void write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		ssize_t w;
		if (poll(&p, 1, 1000) != 1)
			return;
		w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		buf += w;
		n -= (size_t)w;
	}
}

int gs_notice_task_exit(spank_t sp)
{
	uint32_t jobid = 0, ntasks = 0;
	char id[16], step[32], node[256], json[4100], lines[2048];
	size_t len = 0, n;
	int fd;

	if (pair[0] < 0)
		return 0;
	exited++;
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS || (uint32_t)exited < ntasks)
		return 0;
	fd = received();
	close(pair[0]);
	close(pair[1]);
	pair[0] = pair[1] = -1;
	if (fd < 0)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
		goto out;
	snprintf(id, sizeof(id), "%u", jobid);
	if (gs_daemon_status(gs_config.socket, id, json, sizeof(json), &len) != 1)
		goto out;
	step_name(sp, step, sizeof(step));
	node_name(sp, node, sizeof(node));
	n = gs_summary_format(json, len, id, step, node, lines, sizeof(lines));
	if (n > 0)
		write_all(fd, lines, n);
out:
	close(fd);
	return 0;
}

void gs_notice_exit(void)
{
	gs_notice_task_done();
}
