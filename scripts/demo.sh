#!/usr/bin/env bash
# make demo: gpusliced on a private socket and state dir, fakecuda as the GPU
# (one simulated 80 GiB device), target_app under a 128 MiB quota.
set -euo pipefail
BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
work=$(mktemp -d /tmp/gpuslice-demo.XXXXXX)
daemon_pid=
cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work" "/dev/shm/fakecuda-demo-$$"
}
trap cleanup EXIT

export LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# contexts cost no device memory here, so the steps below count allocations only
export FAKECUDA_DEVICES=80GiB FAKECUDA_STATE="demo-$$" FAKECUDA_CTX_BYTES=0
export GPUSLICE_IPC_SOCK="$work/ipc.sock" GPUSLICE_ADMIN_SOCK="$work/admin.sock"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "starting gpusliced (private sockets in $work, fakecuda: one simulated 80 GiB GPU)"
"$BUILD/bin/gpusliced" --runtime-dir "$work/run" --state-dir "$work/state" \
	--ipc-socket "$GPUSLICE_IPC_SOCK" --admin-socket "$GPUSLICE_ADMIN_SOCK" \
	--nvml-library "$BUILD/lib/libnvidia-ml.so.1" --context-probe "$BUILD/bin/gpuslice-ctxprobe" \
	--cuda-library "$BUILD/lib/libcuda.so.1" --config /dev/null >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
	"$BUILD/bin/gpuslice" list >/dev/null 2>&1 && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log"; exit 1; }
	sleep 0.05
done
"$BUILD/bin/gpuslice" gpus

say "gpuslice allocate --gpu-mem 128M demo"
"$BUILD/bin/gpuslice" allocate --gpu-mem 128M demo

say "target_app: 32 MiB steps under the 128 MiB quota (the 5th is past it)"
GPUSLICE_SESSION=demo LD_PRELOAD="$BUILD/lib/libgpuslice.so" \
	"$BUILD/examples/target_app" --step 32M --count 5 --hold 2 &
app=$!
sleep 1
say "gpuslice status demo (while target_app holds its memory)"
"$BUILD/bin/gpuslice" status demo
wait "$app"

say "gpuslice release demo"
"$BUILD/bin/gpuslice" release demo
say "done"
