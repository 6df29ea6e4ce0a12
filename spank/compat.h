/*
 * gpuslice SPANK plugin: what differs between the Slurm releases the plugin
 * is built for, decided here once from the headers found at build time.
 *
 * A SPANK plugin is not ABI-stable across Slurm releases: SPANK_PLUGIN()
 * records SLURM_VERSION_NUMBER in plugin_version and Slurm refuses to load
 * a plugin built for another major.minor release. The same source builds
 * for each release (make spank, make spank-24.11, make spank-RELEASE for
 * SchedMD's releases built by make slurm-src); every version test lives in
 * this file.
 *
 * Built and loaded here: 22.05 (Debian 12), 23.11, 24.05, 24.11 (Debian 13),
 * 25.05, 25.11 and 26.05; see docs/slurm-releases.md.
 */
#ifndef GPUSLICE_SPANK_COMPAT_H
#define GPUSLICE_SPANK_COMPAT_H

#include <slurm/slurm_version.h>

#define GS_SLURM_AT_LEAST(major, minor) (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(major, minor, 0))

#if !GS_SLURM_AT_LEAST(22, 5)
#error "gpuslice's SPANK plugin needs the headers of Slurm 22.05 or newer"
#endif

/* spank_prepend_task_argv(): Slurm 23.11 and newer. */
#define GS_HAVE_PREPEND_TASK_ARGV GS_SLURM_AT_LEAST(23, 11)

/*
 * slurm_spank_init_failure_mode: Slurm 25.05 and newer (spank.h declares
 * it, spank(8) describes it). When a required plugin's slurm_spank_init
 * fails in slurmstepd, this value becomes the step's error:
 * ESPANK_NODE_FAILURE, the default, drains the node; ESPANK_JOB_FAILURE
 * fails the job and leaves the node in service (slurmd kills a batch job
 * as failed, slurmctld does not drain for it). The plugin declares job
 * failure (gpuslice.c): a quota decision, an unreachable gpusliced or a
 * bad plugstack argument is never a node failure. Every callback returns
 * 0 or -1: from 25.05 any other value is an error too. Before 25.05 Slurm
 * does not look the symbol up.
 */
#define GS_HAVE_INIT_FAILURE_MODE GS_SLURM_AT_LEAST(25, 5)

#endif
