/*
 * Remote context: slurmstepd. slurm_spank_task_init runs in each task, as
 * the job's user, just before exec (CUDA_VISIBLE_DEVICES is already set).
 * For a job with a quota it appends the interceptor to LD_PRELOAD (keeping
 * what the user had) and points it at the job's session.
 *
 * Whether the job has a quota, in order:
 *  1. SLURM_SPANK_GPU_MEM in the job's environment (batch script, salloc,
 *     and every srun step inside them);
 *  2. --gpu-mem forwarded to this step (srun outside an allocation);
 *  3. gpusliced holds session <jobid> (e.g. srun --jobid=N from outside);
 *     this is also how a quota from plugstack.conf's default= is known:
 *     the Prolog creates that session only for a job given a share of a
 *     GPU, never for one given whole GPUs (SLURM_SPANK_GPU_MEM_DEFAULT=1
 *     marks such a quota in the job's environment).
 * Injecting for a job without a session is harmless: the interceptor fails
 * closed, which is the right outcome for a job that asked for a quota.
 *
 * Before anything else: when the Prolog left a refusal for the job
 * (gpusliced refused its quota; refusal.c), the task fails with that line.
 * A job that asked for neither a GPU nor a quota gets an empty
 * CUDA_VISIBLE_DEVICES (nogpu=hide, the default): it cannot use memory
 * promised to other jobs.
 *
 * A job without a quota submitted from inside one with a quota (sbatch,
 * salloc or srun in a batch script) carries that job's LD_PRELOAD and
 * GPUSLICE_* in its environment; left alone, its processes would count
 * against the other job's session (or fail closed once that job is gone).
 * Its tasks lose them: the interceptor leaves LD_PRELOAD, GPUSLICE_SESSION
 * and GPUSLICE_IPC_SOCK are unset. A task without GPUSLICE_SESSION is not
 * touched.
 */
#include "gs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the job's quota is plugstack.conf's default= (not its
 * --gpu-mem): the Prolog then created a session only if the job got a
 * share of a GPU, not whole GPUs. */
static int quota_is_default(spank_t sp)
{
	char buf[8];

	if (spank_getenv(sp, GS_DEFAULT_ENV_VAR, buf, sizeof(buf)) == ESPANK_SUCCESS)
		return strcmp(buf, "1") == 0;
	return gs_option_value() == NULL && gs_config.default_bytes != 0;
}

static int job_has_quota(spank_t sp, const char *jobid, const char **why)
{
	char buf[64];
	int r;

	if (spank_getenv(sp, GS_JOB_ENV_VAR, buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] != '\0') {
		*why = GS_JOB_ENV_VAR;
		if (!quota_is_default(sp))
			return 1;
	} else if (gs_option_value()) {
		*why = "--gpu-mem";
		return 1;
	}
	/* default= (or no quota in the environment at all): the session the
	 * Prolog created, or none. */
	r = gs_daemon_has_session(gs_config.socket, jobid);
	if (r == 1) {
		*why = "gpusliced session";
		return 1;
	}
	if (r < 0 && (*why != NULL || gs_config.default_bytes)) {
		/* gpusliced does not answer: a job meant to have a quota is
		 * injected, and its interceptor fails closed. */
		*why = "default= (gpusliced unreachable)";
		return 1;
	}
	return 0;
}

/* Is path already one of the entries of an LD_PRELOAD list (separated by
 * colons or blanks, as ld.so reads it)? */
static int preload_has(const char *list, const char *path)
{
	size_t plen = strlen(path);
	const char *p = list;

	while (*p) {
		size_t n;
		while (*p == ':' || *p == ' ' || *p == '\t')
			p++;
		n = strcspn(p, ": \t");
		if (n == plen && strncmp(p, path, n) == 0)
			return 1;
		p += n;
	}
	return 0;
}

/* Fetch LD_PRELOAD from the task's environment into a malloc'd string
 * ("" when unset). */
static char *get_preload(spank_t sp)
{
	size_t len = 1024;
	char *buf = NULL;

	for (;;) {
		char *nb = realloc(buf, len);
		int rc;

		if (!nb) {
			free(buf);
			return NULL;
		}
		buf = nb;
		rc = spank_getenv(sp, "LD_PRELOAD", buf, (int)len);
		if (rc == ESPANK_SUCCESS)
			return buf;
		if (rc == ESPANK_ENV_NOEXIST) {
			buf[0] = '\0';
			return buf;
		}
		if (rc != ESPANK_NOSPACE || len >= (1u << 20)) {
			free(buf);
			return NULL;
		}
		len *= 2;
	}
}

/* LD_PRELOAD list without the entries equal to path, joined by colons;
 * malloc'd. */
static char *preload_without(const char *list, const char *path)
{
	size_t plen = strlen(path);
	char *out = malloc(strlen(list) + 1);
	char *o = out;
	const char *p = list;

	if (!out)
		return NULL;
	while (*p) {
		size_t n;
		while (*p == ':' || *p == ' ' || *p == '\t')
			p++;
		n = strcspn(p, ": \t");
		if (n > 0 && !(n == plen && strncmp(p, path, n) == 0)) {
			if (o != out)
				*o++ = ':';
			memcpy(o, p, n);
			o += n;
		}
		p += n;
	}
	*o = '\0';
	return out;
}

static int forget_inherited(spank_t sp, const char *id)
{
	static const char *const vars[] = {"GPUSLICE_SESSION", "GPUSLICE_IPC_SOCK"};
	char buf[64];
	char *old = NULL, *preload = NULL;
	size_t i;
	int rc, rv = -1;

	rc = spank_getenv(sp, "GPUSLICE_SESSION", buf, sizeof(buf));
	if (rc == ESPANK_ENV_NOEXIST)
		return 0;
	old = get_preload(sp);
	if (!old) {
		gs_error("job %s: cannot read LD_PRELOAD", id);
		goto out;
	}
	if (preload_has(old, gs_config.lib)) {
		preload = preload_without(old, gs_config.lib);
		if (!preload) {
			gs_error("job %s: out of memory", id);
			goto out;
		}
		if (preload[0])
			rc = spank_setenv(sp, "LD_PRELOAD", preload, 1);
		else
			rc = spank_unsetenv(sp, "LD_PRELOAD");
		if (rc != ESPANK_SUCCESS) {
			gs_error("job %s: cannot remove the interceptor from LD_PRELOAD: %s", id, spank_strerror(rc));
			goto out;
		}
	}
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		rc = spank_unsetenv(sp, vars[i]);
		if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_NOEXIST) {
			gs_error("job %s: cannot unset %s: %s", id, vars[i], spank_strerror(rc));
			goto out;
		}
	}
	gs_debug("job %s: no GPU memory quota; removed the gpuslice environment inherited from the submitting job", id);
	rv = 0;
out:
	free(old);
	free(preload);
	return rv;
}

/* Did Slurm give this task a GPU (gres/gpu or gres/shard)? */
static int task_has_gpu(spank_t sp)
{
	static const char *const vars[] = {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_SHARDS_ON_NODE"};
	char buf[256];
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		spank_err_t rc;

		buf[0] = '\0';
		rc = spank_getenv(sp, vars[i], buf, sizeof(buf));
		if (rc == ESPANK_NOSPACE || (rc == ESPANK_SUCCESS && buf[0] != '\0'))
			return 1;
	}
	return 0;
}

/* A job that asked for no GPU and no GPU memory gets no GPU (nogpu=hide,
 * the default): CUDA sees no device, so it cannot take memory that the
 * scheduler promised to other jobs. Clusters whose cgroup.conf has
 * ConstrainDevices=yes also deny the device files. */
static int hide_gpus(spank_t sp, const char *id)
{
	int rc;

	if (gs_config.nogpu_allow || task_has_gpu(sp))
		return 0;
	rc = spank_setenv(sp, "CUDA_VISIBLE_DEVICES", "", 1);
	if (rc != ESPANK_SUCCESS) {
		gs_error("job %s: cannot set CUDA_VISIBLE_DEVICES: %s", id, spank_strerror(rc));
		return -1;
	}
	gs_debug("job %s: no GPU and no --gpu-mem asked: GPUs hidden", id);
	return 0;
}

int gs_remote_task_init(spank_t sp)
{
	int rv = -1, rc;
	uint32_t jobid = 0;
	char id[16];
	const char *why = NULL;
	char *old = NULL, *preload = NULL;

	rc = spank_get_item(sp, S_JOB_ID, &jobid);
	if (rc != ESPANK_SUCCESS) {
		gs_error("cannot read the job id: %s", spank_strerror(rc));
		goto out;
	}
	snprintf(id, sizeof(id), "%u", jobid);
	if (gs_refusal_check(id) < 0)
		goto out;
	if (!job_has_quota(sp, id, &why)) {
		if (forget_inherited(sp, id) < 0)
			goto out;
		rv = hide_gpus(sp, id);
		goto out;
	}

	old = get_preload(sp);
	if (!old) {
		gs_error("job %s: cannot read LD_PRELOAD", id);
		goto out;
	}
	if (!preload_has(old, gs_config.lib)) {
		size_t n = strlen(old) + strlen(gs_config.lib) + 2;
		preload = malloc(n);
		if (!preload) {
			gs_error("job %s: out of memory", id);
			goto out;
		}
		if (old[0])
			snprintf(preload, n, "%s:%s", old, gs_config.lib);
		else
			snprintf(preload, n, "%s", gs_config.lib);
		rc = spank_setenv(sp, "LD_PRELOAD", preload, 1);
		if (rc != ESPANK_SUCCESS) {
			gs_error("job %s: cannot set LD_PRELOAD: %s", id, spank_strerror(rc));
			goto out;
		}
	}
	rc = spank_setenv(sp, "GPUSLICE_SESSION", id, 1);
	if (rc != ESPANK_SUCCESS) {
		gs_error("job %s: cannot set GPUSLICE_SESSION: %s", id, spank_strerror(rc));
		goto out;
	}
	rc = spank_setenv(sp, "GPUSLICE_IPC_SOCK", gs_config.socket, 1);
	if (rc != ESPANK_SUCCESS) {
		gs_error("job %s: cannot set GPUSLICE_IPC_SOCK: %s", id, spank_strerror(rc));
		goto out;
	}
	gs_debug("job %s: interceptor injected (quota from %s)", id, why);
	gs_notice_task(sp, id);
	rv = 0;
out:
	gs_notice_task_done();
	free(old);
	free(preload);
	return rv;
}
