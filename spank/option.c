/* --gpu-mem: one option table, registered with spank_option_register. */
#include "gs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Last value seen. Slurm may call the callback more than once (a value
 * inherited from the environment, then the command line; twice in
 * slurmstepd), so the callback only records: validation happens once, in
 * init_post_opt (where a failure makes srun/sbatch/salloc exit 1 before
 * anything is submitted) or where the value is used. */
static char *opt_value;

static int opt_gpu_mem(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	return gs_option_record(&opt_value, optarg, "gpu-mem");
}

static struct spank_option options[] = {
	{"gpu-mem", "SIZE",
	 "GPU memory quota of the job on each of its GPUs, e.g. 8G, 512M or 8192 (MB); "
	 "suffixes K, M, G, T (powers of 1024), default unit MB [gpuslice]",
	 1, 0, opt_gpu_mem},
	SPANK_OPTIONS_TABLE_END,
};

int gs_option_register(spank_t sp)
{
	if (gs_options_register(sp, options) != 0)
		return -1;
	return gs_compute_register(sp);
}

const char *gs_option_value(void)
{
	return opt_value;
}

int gs_option_check(const char *value, uint64_t max_bytes, uint64_t *bytes, char *err, size_t errlen)
{
	char maxs[32];

	if (gs_parse_size(value, bytes) < 0 || *bytes == 0) {
		snprintf(err, errlen,
			 "invalid --gpu-mem '%s': expected a positive size such as 8G, 512M or 8192 (MB); "
			 "suffixes K, M, G, T (powers of 1024)",
			 value);
		return -1;
	}
	if (max_bytes && *bytes > max_bytes) {
		gs_format_size(max_bytes, maxs, sizeof(maxs));
		snprintf(err, errlen, "invalid --gpu-mem '%s': larger than this cluster's maximum of %s", value, maxs);
		return -1;
	}
	return 0;
}

void gs_option_cleanup(void)
{
	free(opt_value);
	opt_value = NULL;
	gs_compute_cleanup();
}

int gs_submit_quota(uint64_t *bytes)
{
	char err[256];
	const char *v = gs_option_value();

	*bytes = 0;
	if (gs_compute_check() < 0)
		return -1;
	if (!v) {
		*bytes = gs_config.default_bytes;
		return 0;
	}
	if (gs_option_check(v, gs_config.max_bytes, bytes, err, sizeof(err)) < 0) {
		gs_error("%s", err);
		return -1;
	}
	return 0;
}

int gs_submit_forget_inherited(spank_t sp)
{
	static const char *const env[] = {GS_JOB_ENV_VAR, GS_DEFAULT_ENV_VAR, GS_OPTION_ENV_VAR};
	static const char *const ctl[] = {GS_JOB_CONTROL_VAR, GS_DEFAULT_CONTROL_VAR, GS_OPTION_CONTROL_VAR,
					  GS_COMPUTE_CONTROL_VAR, GS_COMPUTE_MAX_CONTROL_VAR};
	size_t i;
	int rc;

	for (i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
		const char *v = getenv(env[i]);

		if (!v)
			continue;
		gs_verbose("ignoring %s=%s from the submitting environment: a new job's quota comes from its own "
			   "--gpu-mem (or default=)",
			   env[i], v);
		if (unsetenv(env[i]) < 0) {
			gs_error("cannot remove %s from the environment", env[i]);
			return -1;
		}
	}
	for (i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
		rc = spank_job_control_unsetenv(sp, ctl[i]);
		if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_NOEXIST) {
			gs_error("cannot remove %s from the job control environment: %s", ctl[i], spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}

int gs_submit_publish(spank_t sp, uint64_t bytes)
{
	char val[32], human[32];
	int rc;

	snprintf(val, sizeof(val), "%llu", (unsigned long long)bytes);
	rc = spank_job_control_setenv(sp, GS_JOB_CONTROL_VAR, val, 1);
	if (rc != ESPANK_SUCCESS) {
		gs_error("cannot pass the GPU memory quota to the job: %s", spank_strerror(rc));
		return -1;
	}
	rc = spank_job_control_setenv(sp, GS_DEFAULT_CONTROL_VAR, gs_option_value() ? "0" : "1", 1);
	if (rc != ESPANK_SUCCESS) {
		gs_error("cannot pass where the GPU memory quota comes from to the job: %s", spank_strerror(rc));
		return -1;
	}
	gs_format_size(bytes, human, sizeof(human));
	gs_verbose("GPU memory quota %s per GPU%s", human, gs_option_value() ? "" : " (default=)");
	return gs_compute_publish(sp);
}
