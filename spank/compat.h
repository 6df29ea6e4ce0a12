/*
 * gpuslice SPANK plugin: what differs between the Slurm releases the plugin
 * is built for, decided here once from the headers found at build time.
 *
 * A SPANK plugin is not ABI-stable across Slurm releases: SPANK_PLUGIN()
 * records SLURM_VERSION_NUMBER in plugin_version and Slurm refuses to load
 * a plugin built for another major.minor release. The same source builds
 * for each release (make spank, make spank-24.11); every version test lives
 * in this file.
 *
 * Tested here: 22.05 (Debian 12) and 24.11 (Debian 13); see docs/slurm.md.
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

#endif
