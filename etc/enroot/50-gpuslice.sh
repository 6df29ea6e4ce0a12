#! /usr/bin/env bash
# gpuslice's enroot hook: installed as /etc/enroot/hooks.d/50-gpuslice.sh, it
# runs (as every hook, with full capabilities, before the container switches
# to its root) for each `enroot start`, pyxis's included. On a node where
# gpusliced runs it makes the job's GPU-memory quota hold inside the
# container:
#   - the interceptor's directory is bound read-only at the same path, so
#     the LD_PRELOAD the SPANK plugin gave the task resolves inside;
#   - gpusliced's runtime directory (its IPC socket) is bound at the same
#     path: the interceptor attaches through it and gets the ledger fds
#     over it (SCM_RIGHTS), as on the host; the directory, not the socket
#     file, so a restarted gpusliced's new socket is seen;
#   - LD_PRELOAD in the container's environment (enroot builds it afresh
#     from the image and environ.d) starts with the interceptor, and
#     GPUSLICE_SESSION / GPUSLICE_IPC_SOCK / GPUSLICE_IPC_TOKEN are passed on
#     when the task has them.
# A process inside that drops LD_PRELOAD is still the job's (gpusliced tells
# a process's job from its cgroup and ancestry, not its environment): the
# audit stops it when the driver shows it over the quota.
#
# Settings (environment of enroot start, or enroot.conf):
#   GPUSLICE_LIB       the interceptor (default /usr/lib/gpuslice/libgpuslice.so)
#   GPUSLICE_IPC_SOCK  gpusliced's IPC socket (default /run/gpuslice/ipc.sock)
set -euo pipefail

lib=${GPUSLICE_LIB:-/usr/lib/gpuslice/libgpuslice.so}
sock=${GPUSLICE_IPC_SOCK:-/run/gpuslice/ipc.sock}

# No gpusliced on this node: nothing to enforce.
if [ ! -S "${sock}" ]; then
    exit 0
fi
if [ ! -f "${lib}" ]; then
    echo "gpuslice: enroot hook: ${lib} is missing: the container cannot be held to its GPU-memory quota" >&2
    exit 1
fi

libdir=$(dirname "${lib}")
rundir=$(dirname "${sock}")
printf '%s %s none x-create=dir,bind,ro,nosuid,nodev,private\n' "${libdir}" "${libdir}" >> "${ENROOT_MOUNTS}"
printf '%s %s none x-create=dir,bind,ro,nosuid,nodev,noexec,private\n' "${rundir}" "${rundir}" >> "${ENROOT_MOUNTS}"

# The container's LD_PRELOAD so far (image, environ.d, --env): the last
# definition in the environment file wins.
preload=$(sed -n 's/^LD_PRELOAD=//p' "${ENROOT_ENVIRON}" | tail -n 1)
case " ${preload} " in
*" ${lib} "*) ;;
*) preload="${lib}${preload:+ ${preload}}" ;;
esac
{
    printf 'LD_PRELOAD=%s\n' "${preload}"
    printf 'GPUSLICE_IPC_SOCK=%s\n' "${sock}"
    if [ -n "${GPUSLICE_SESSION-}" ]; then
        printf 'GPUSLICE_SESSION=%s\n' "${GPUSLICE_SESSION}"
    fi
    if [ -n "${GPUSLICE_IPC_TOKEN-}" ]; then
        printf 'GPUSLICE_IPC_TOKEN=%s\n' "${GPUSLICE_IPC_TOKEN}"
    fi
} >> "${ENROOT_ENVIRON}"
