#!/bin/sh
# gpuslice: the other way to bind the interceptor into Apptainer containers,
# for sites whose jobs use --contain, which ignores every 'bind path' of
# apptainer.conf (gpuslice.conf's too: such a job runs without the
# interceptor, held only by gpusliced's audit). Binds the user's environment
# asks for (APPTAINER_BIND, SINGULARITY_BIND) are kept with --contain. As a
# Slurm TaskProlog (or called from the site's), this script exports them for
# each task on a node where gpusliced runs. Use it INSTEAD of gpuslice.conf's
# lines, not with them: Apptainer refuses a destination bound twice. A user
# who unsets them gets the audit, as one who drops LD_PRELOAD.
binds=/usr/lib/gpuslice:/usr/lib/gpuslice:ro,/run/gpuslice:/run/gpuslice:ro,/usr/share/gpuslice/apptainer/ld.so.preload:/etc/ld.so.preload:ro
[ -S /run/gpuslice/ipc.sock ] || exit 0
echo "export APPTAINER_BIND=${APPTAINER_BIND:+$APPTAINER_BIND,}$binds"
echo "export SINGULARITY_BIND=${SINGULARITY_BIND:+$SINGULARITY_BIND,}$binds"
