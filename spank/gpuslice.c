/*
 * gpuslice SPANK plugin: per-job GPU-memory quotas.
 *
 *   srun/sbatch/salloc --gpu-mem=SIZE   the job's quota on each of its GPUs
 *
 * This file holds the SPANK entry points only; each one switches on
 * spank_context() and hands off to the file of that context.
 */
#include "gs.h"

#include <stdio.h>

struct gs_config gs_config;

#pragma GCC visibility push(default)

SPANK_PLUGIN(gpuslice, 1);

#if GS_HAVE_INIT_FAILURE_MODE
/* A failed slurm_spank_init fails the job, never the node (compat.h). */
int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[512];
	spank_context_t ctx = spank_context();

	if (gs_args_parse(&gs_config, ac, av, err, sizeof(err)) < 0) {
		gs_error("%s", err);
		return -1;
	}
	switch (ctx) {
	case S_CTX_LOCAL:
		if (gs_local_init(sp) < 0)
			return -1;
		return gs_option_register(sp);
	case S_CTX_ALLOCATOR:
		if (gs_allocator_init(sp) < 0)
			return -1;
		return gs_option_register(sp);
	case S_CTX_REMOTE:
		return gs_option_register(sp);
	default:
		return 0;
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
		return gs_local_post_opt(sp);
	case S_CTX_ALLOCATOR:
		return gs_allocator_post_opt(sp);
	default:
		return 0;
	}
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_REMOTE:
		return gs_remote_task_init(sp);
	default:
		return 0;
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	return spank_context() == S_CTX_REMOTE ? gs_notice_user_init(sp) : 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	return spank_context() == S_CTX_REMOTE ? gs_notice_task_exit(sp) : 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	gs_notice_exit();
	gs_option_cleanup();
	return 0;
}

#pragma GCC visibility pop
