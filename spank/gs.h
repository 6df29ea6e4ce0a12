/*
 * gpuslice SPANK plugin: shared declarations.
 *
 * gpuslice.c holds the SPANK entry points and dispatches on spank_context()
 * to one file per context: local.c (srun), allocator.c (sbatch, salloc),
 * remote.c (slurmstepd). args.c parses plugstack.conf arguments, option.c
 * owns --gpu-mem, size.c parses sizes, daemon.c asks gpusliced about a
 * session.
 */
#ifndef GPUSLICE_SPANK_GS_H
#define GPUSLICE_SPANK_GS_H

#include <stdbool.h>
#include <stdint.h>

#include <slurm/spank.h>

#include "compat.h"
#include "size.h"

#define GS_PLUGIN "gpuslice"

/* Every log line starts with the plugin's name. */
#define gs_error(fmt, ...) slurm_error(GS_PLUGIN ": " fmt, ##__VA_ARGS__)
#define gs_info(fmt, ...) slurm_info(GS_PLUGIN ": " fmt, ##__VA_ARGS__)
#define gs_verbose(fmt, ...) slurm_verbose(GS_PLUGIN ": " fmt, ##__VA_ARGS__)
#define gs_debug(fmt, ...) slurm_debug(GS_PLUGIN ": " fmt, ##__VA_ARGS__)
#define gs_user(fmt, ...) slurm_spank_log(GS_PLUGIN ": " fmt, ##__VA_ARGS__)

#define GS_DEFAULT_LIB "/usr/lib/gpuslice/libgpuslice.so"
#define GS_DEFAULT_SOCKET "/run/gpuslice/ipc.sock"

/* Name given to spank_job_control_setenv: Prolog/Epilog see SPANK_GPU_MEM,
 * the job's environment (batch script, salloc shell) SLURM_SPANK_GPU_MEM. */
#define GS_JOB_CONTROL_VAR "GPU_MEM"
#define GS_JOB_ENV_VAR "SLURM_SPANK_GPU_MEM"

/* Set beside GPU_MEM: 1 when the quota is plugstack.conf's default=, 0
 * when it is the job's --gpu-mem. A default applies only to jobs that get a share of
 * a GPU (the Prolog creates no session for a job given whole GPUs, and its
 * tasks then get no interceptor). */
#define GS_DEFAULT_CONTROL_VAR "GPU_MEM_DEFAULT"
#define GS_DEFAULT_ENV_VAR "SLURM_SPANK_GPU_MEM_DEFAULT"

/* Where Slurm itself keeps --gpu-mem: srun/sbatch/salloc put every option
 * used into the job control environment as _SLURM_SPANK_OPTION_<plugin>_
 * <option>, so the job's environment holds SLURM_SPANK_ + that name, and
 * srun/sbatch/salloc read an option back from SLURM_SPANK_ + that name as
 * if it had been given on the command line. */
#define GS_OPTION_CONTROL_VAR "_SLURM_SPANK_OPTION_" GS_PLUGIN "_gpu_mem"
#define GS_OPTION_ENV_VAR "SLURM_SPANK_" GS_OPTION_CONTROL_VAR

/* plugstack.conf arguments (args.c). */
struct gs_config {
	char lib[4096];       /* lib=: interceptor preloaded into tasks */
	char socket[108];     /* socket=: gpusliced IPC socket (sun_path size) */
	uint64_t default_bytes; /* default=: quota for jobs asking none; 0 = none */
	uint64_t max_bytes;   /* max=: largest accepted --gpu-mem; 0 = no limit */
	char refused[4096];   /* refused=: where the Prolog leaves a refused job's reason */
	bool nogpu_allow;     /* nogpu=allow: jobs without a GPU keep seeing every GPU */
	int notice;           /* notice=: GS_NOTICE_* users are told (default both) */
	char compute[16];     /* compute=: accepted, not read (the site's policy is in job_submit.lua, gpusliced.yaml) */
	int compute_cap;      /* compute_cap=: accepted, not read */
};

/* What users are told (notice.c): the refusal line the interceptor writes,
 * the lines at the end of each step. */
#define GS_NOTICE_REFUSAL 1
#define GS_NOTICE_SUMMARY 2

extern struct gs_config gs_config;

int gs_args_parse(struct gs_config *cfg, int ac, char **av, char *err, size_t errlen);

/* --gpu-compute, --gpu-compute-max (compute.c): GPU_COMPUTE=<percent> and
 * GPU_COMPUTE_MAX=<percent> for job_submit.lua and the Prolog, when asked. */
#define GS_COMPUTE_CONTROL_VAR "GPU_COMPUTE"
#define GS_COMPUTE_MAX_CONTROL_VAR "GPU_COMPUTE_MAX"
int gs_compute_register(spank_t sp);
/* A percent 1..100; 0 or -1. */
int gs_parse_percent(const char *s, int *out);
/* Validates the options given (slurm_error and -1 on a bad one). */
int gs_compute_check(void);
/* Passes the share and ceiling the job asked for (the options only). */
int gs_compute_publish(spank_t sp);
void gs_compute_cleanup(void);

/* --gpu-mem (option.c). */
int gs_option_register(spank_t sp);
/* optutil.c: registers each option of a table ending in
 * SPANK_OPTIONS_TABLE_END. */
int gs_options_register(spank_t sp, struct spank_option *table);
/* An option callback's recording of its value: *dst becomes a copy of
 * optarg (NULL: unchanged); -1 when out of memory. */
int gs_option_record(char **dst, const char *optarg, const char *name);
/* Raw value given on the command line or inherited from the environment;
 * NULL when the option was not used. */
const char *gs_option_value(void);
/* Validate a --gpu-mem value against the syntax and max=. Writes the
 * user-facing message to err on failure and returns -1. */
int gs_option_check(const char *value, uint64_t max_bytes, uint64_t *bytes, char *err, size_t errlen);
void gs_option_cleanup(void);

/* Per-context handlers. */
int gs_local_init(spank_t sp);         /* srun */
int gs_allocator_init(spank_t sp);     /* sbatch, salloc */
int gs_local_post_opt(spank_t sp);     /* srun */
int gs_allocator_post_opt(spank_t sp); /* sbatch, salloc */
int gs_remote_task_init_privileged(spank_t sp);
int gs_remote_task_init(spank_t sp);

/* Shared by local.c and allocator.c: the job's quota from --gpu-mem or
 * default=, 0 when the job asks none. -1 on invalid input (logged). */
int gs_submit_quota(uint64_t *bytes);
/* Publish the quota to Prolog/Epilog (spank_job_control_setenv). */
int gs_submit_publish(spank_t sp, uint64_t bytes);
/* A new job is being submitted: forget the quota of the job it is
 * submitted from (its SLURM_SPANK_* variables, which Slurm would copy into
 * the new job and read back as --gpu-mem). Called from slurm_spank_init,
 * before Slurm reads options from the environment, and again before the
 * quota is published. -1 on failure (logged). */
int gs_submit_forget_inherited(spank_t sp);

/* refusal.c: when the Prolog left a refusal for the job, print it and
 * return -1 (the task, hence the job, fails; the node stays up). 0 when
 * there is none. */
int gs_refusal_check(const char *jobid);

/* notice.c: what users are told. In slurmstepd before the tasks fork: */
int gs_notice_user_init(spank_t sp);
/* In a task whose job has a quota, after the interceptor is injected. */
void gs_notice_task(spank_t sp, const char *id);
/* In every task, last: its copies of slurmstepd's descriptors closed. */
void gs_notice_task_done(void);
/* In slurmstepd as each task exits; after the node's last, the end-of-step
 * lines. */
int gs_notice_task_exit(spank_t sp);
void gs_notice_exit(void);

/* daemon.c: does gpusliced hold session id? 1 yes, 0 no, -1 unknown. */
int gs_daemon_has_session(const char *socket_path, const char *id);
/* The same, with the session object (JSON) copied to out when 1. */
int gs_daemon_status(const char *socket_path, const char *id, char *out, size_t cap, size_t *len);

#endif
