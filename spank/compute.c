/* --gpu-compute / --gpu-compute-max: the job's share of GPU time on each of
 * its GPUs (docs/daemon.md, "Compute share"), and plugstack.conf's
 * compute= / compute_cap= defaults. Validated at submit like --gpu-mem;
 * passed to the Prolog as GPU_COMPUTE (a percent, "proportional" or "off")
 * and GPU_COMPUTE_MAX (a percent) in the job control environment. */
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
	 "share of GPU time on each of the job's GPUs when they are contended, 1-100; a weight, not a cap: "
	 "an idle neighbour's time is used [gpuslice]",
	 1, 0, opt_gpu_compute},
	{"gpu-compute-max", "PERCENT",
	 "ceiling of the job's GPU time on each of its GPUs, 1-100, held even when it is alone [gpuslice]", 1, 0,
	 opt_gpu_compute_max},
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
	char max[16];
	const char *share = opt_share ? opt_share : gs_config.compute;
	int rc;

	if (share[0] != '\0') {
		rc = spank_job_control_setenv(sp, GS_COMPUTE_CONTROL_VAR, share, 1);
		if (rc != ESPANK_SUCCESS) {
			gs_error("cannot pass the GPU compute share to the job: %s", spank_strerror(rc));
			return -1;
		}
	}
	max[0] = '\0';
	if (opt_max)
		snprintf(max, sizeof(max), "%s", opt_max);
	else if (gs_config.compute_cap)
		snprintf(max, sizeof(max), "%d", gs_config.compute_cap);
	if (max[0] != '\0') {
		rc = spank_job_control_setenv(sp, GS_COMPUTE_MAX_CONTROL_VAR, max, 1);
		if (rc != ESPANK_SUCCESS) {
			gs_error("cannot pass the GPU compute ceiling to the job: %s", spank_strerror(rc));
			return -1;
		}
	}
	if (share[0] != '\0' || max[0] != '\0')
		gs_verbose("GPU compute share %s, ceiling %s", share[0] ? share : "none", max[0] ? max : "none");
	return 0;
}

void gs_compute_cleanup(void)
{
	free(opt_share);
	free(opt_max);
	opt_share = opt_max = NULL;
}
