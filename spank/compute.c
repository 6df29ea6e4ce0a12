/* --gpu-compute / --gpu-compute-max: the share of GPU time a job asks for
 * on each of its GPUs (docs/compute-share.md). Checked for form
 * here, passed as GPU_COMPUTE and GPU_COMPUTE_MAX (percents) in the job
 * control environment: a request, which job_submit.lua checks against the
 * site's settings at submit and gpusliced against its own when the Prolog
 * creates the session. What the job gets by default is the site's, set
 * there: never here, in a process the user runs. plugstack.conf's
 * compute= / compute_cap= are still accepted and no longer read. */
#include "gs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *opt_share, *opt_max;

static int opt_gpu_compute(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	return gs_option_record(&opt_share, optarg, "gpu-compute");
}

static int opt_gpu_compute_max(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	return gs_option_record(&opt_max, optarg, "gpu-compute-max");
}

static struct spank_option compute_options[] = {
	{"gpu-compute", "PERCENT",
	 "share of GPU time on each of the job's GPUs when they are contended, 1-100, up to what the cluster "
	 "allows (by default the quota's fraction of the GPU, which a job gets without this option); a weight, "
	 "not a cap: an idle neighbour's time is used [gpuslice]",
	 1, 0, opt_gpu_compute},
	{"gpu-compute-max", "PERCENT",
	 "ceiling of the job's GPU time on each of its GPUs, 1-100, held even when it is alone; at most the "
	 "cluster's own ceiling, if it has one [gpuslice]",
	 1, 0, opt_gpu_compute_max},
	SPANK_OPTIONS_TABLE_END,
};

int gs_compute_register(spank_t sp)
{
	return gs_options_register(sp, compute_options);
}

int gs_parse_percent(const char *s, int *out)
{
	char *end;
	long v;

	if (!s || s[0] < '0' || s[0] > '9')
		return -1;
	v = strtol(s, &end, 10);
	if (*end != '\0' || v < 1 || v > 100)
		return -1;
	*out = (int)v;
	return 0;
}

int gs_compute_check(void)
{
	int p;

	if (opt_share && gs_parse_percent(opt_share, &p) < 0) {
		gs_error("invalid --gpu-compute '%s': expected a percent of the GPU from 1 to 100", opt_share);
		return -1;
	}
	if (opt_max && gs_parse_percent(opt_max, &p) < 0) {
		gs_error("invalid --gpu-compute-max '%s': expected a percent of the GPU from 1 to 100", opt_max);
		return -1;
	}
	return 0;
}

int gs_compute_publish(spank_t sp)
{
	int rc;

	if (gs_config.compute[0] != '\0' || gs_config.compute_cap)
		gs_verbose("plugstack.conf's compute= and compute_cap= are not read: the site's GPU time policy is "
			   "in job_submit.lua and gpusliced.yaml");
	if (opt_share) {
		rc = spank_job_control_setenv(sp, GS_COMPUTE_CONTROL_VAR, opt_share, 1);
		if (rc != ESPANK_SUCCESS) {
			gs_error("cannot pass the GPU compute share to the job: %s", spank_strerror(rc));
			return -1;
		}
	}
	if (opt_max) {
		rc = spank_job_control_setenv(sp, GS_COMPUTE_MAX_CONTROL_VAR, opt_max, 1);
		if (rc != ESPANK_SUCCESS) {
			gs_error("cannot pass the GPU compute ceiling to the job: %s", spank_strerror(rc));
			return -1;
		}
	}
	if (opt_share || opt_max)
		gs_verbose("GPU compute share asked %s, ceiling %s (the cluster's settings apply)",
			   opt_share ? opt_share : "none", opt_max ? opt_max : "none");
	return 0;
}

void gs_compute_cleanup(void)
{
	free(opt_share);
	free(opt_max);
	opt_share = opt_max = NULL;
}
