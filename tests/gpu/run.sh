#!/usr/bin/env bash
# The real-GPU suite (tests/gpu/README.md): starts the bundled gpusliced on
# private sockets under a temporary directory, runs every case (runner.py)
# and writes one JSON line per case.
#
#   run.sh [--fakecuda LIBDIR] [--cases REGEX] [--budget SECONDS]
#          [--rest EARLIER.jsonl] [RESULTS]
#
# RESULTS defaults to $OUT/gpu-results.jsonl when $OUT is set (a device
# run), else ./gpu-results.jsonl (gpu-results-rest.jsonl with --rest).
# Beside it: <results>.gpusliced.log (the daemon's log) and <results>.log
# (the runner's summary). --rest runs only the cases an earlier run's
# results did not run to the end (no line, or marked cut by its budget);
# make real-gpu-report RESULTS="EARLIER RESULTS" makes one page of both.
# Without --fakecuda the machine's own driver is used: libcuda.so.1 and
# libnvidia-ml.so.1 from the default library path (run as root). With it,
# fakecuda's libraries in LIBDIR stand in (FAKECUDA_DEVICES, default 80GiB).
# Exit status: 0 when no case failed, 1 when one did, 2 when the suite
# could not start.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fake="" cases="" budget=345 results="" rest=""
while [ $# -gt 0 ]; do
	case "$1" in
	--fakecuda) fake=$(cd "$2" && pwd) || exit 2; shift 2 ;;
	--cases) cases=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--rest) [ -f "$2" ] || { echo "run.sh: --rest $2: no such file" >&2; exit 2; }
		rest=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
	-h|--help) sed -n '2,19p' "$0"; exit 0 ;;
	-*) echo "run.sh: unknown flag $1" >&2; exit 2 ;;
	*) results=$1; shift ;;
	esac
done
if [ -z "$results" ]; then
	results=${OUT:-$PWD}/gpu-results${rest:+-rest}.jsonl
fi
mkdir -p "$(dirname "$results")" || exit 2
results=$(cd "$(dirname "$results")" && pwd)/$(basename "$results")
if [ -n "$rest" ] && [ "$rest" -ef "$results" ]; then
	echo "run.sh: --rest $rest is the results file too; name another" >&2
	exit 2
fi
base=${results%.jsonl}
# The machine's own Python: the first one that has PyTorch, JAX or CuPy
# (a GPU machine's frameworks may live in another interpreter than
# python3), else python3. PYTHON=... overrides.
python=${PYTHON:-}
if [ -z "$python" ]; then
	for p in python3 python /usr/local/bin/python3 /opt/conda/bin/python /usr/bin/python3; do
		command -v "$p" >/dev/null 2>&1 || continue
		[ -z "$python" ] && python=$p
		if "$p" -c 'import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in ("torch", "jax", "cupy")))' 2>/dev/null; then
			python=$p
			break
		fi
	done
fi
[ -n "$python" ] && command -v "$python" >/dev/null || { echo "run.sh: no Python found (set PYTHON)" >&2; exit 2; }

# sun_path holds 108 bytes: keep the sockets short, under /tmp.
tmp=$(mktemp -d /tmp/gsgpu.XXXXXX) || exit 2
chmod 755 "$tmp"
run=$tmp/run
daemon_pid=""
cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon_pid" 2>/dev/null
	fi
	[ -f "$tmp/gpusliced.log" ] && cp "$tmp/gpusliced.log" "$base.gpusliced.log"
	[ -n "$fake" ] && rm -f "/dev/shm/fakecuda-$FAKECUDA_STATE"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

unset LD_PRELOAD GPUSLICE_SESSION
nvml_lib="" cuda_lib=""
if [ -n "$fake" ]; then
	export LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export FAKECUDA_DEVICES=${FAKECUDA_DEVICES:-80GiB}
	export FAKECUDA_STATE=gpusuite-$$
	nvml_lib=$fake/libnvidia-ml.so.1 cuda_lib=$fake/libcuda.so.1
fi
export GPUSLICE_ADMIN_SOCK=$run/admin.sock GPUSLICE_IPC_SOCK=$run/ipc.sock

"$here/bin/gpusliced" --runtime-dir "$run" --state-dir "$tmp/state" \
	--ipc-socket "$GPUSLICE_IPC_SOCK" --admin-socket "$GPUSLICE_ADMIN_SOCK" \
	--nvml-library "$nvml_lib" --cuda-library "$cuda_lib" \
	--context-probe "$here/bin/gpuslice-ctxprobe" \
	--recovery-interval 500ms --overcommit 2 --log-level debug \
	>"$tmp/gpusliced.log" 2>&1 &
daemon_pid=$!

cli() { "$here/bin/gpuslice" "$@"; }
for i in $(seq 150); do
	cli gpus --json >/dev/null 2>&1 && break
	if ! kill -0 "$daemon_pid" 2>/dev/null || [ "$i" = 150 ]; then
		echo "run.sh: gpusliced did not start:" >&2
		tail -n 30 "$tmp/gpusliced.log" >&2
		exit 2
	fi
	sleep 0.1
done
# The daemon measures what a context costs while no session holds the GPU;
# give it up to 10 s before the first session.
for _ in $(seq 100); do
	cli gpus --json 2>/dev/null | grep -q '"context_cost_bytes": [1-9]' && break
	sleep 0.1
done

PYTHONDONTWRITEBYTECODE=1 "$python" "$here/runner.py" --bundle "$here" --tmp "$tmp" --out "$results" \
	--daemon-log "$tmp/gpusliced.log" --fakecuda "$fake" --cases "$cases" --budget "$budget" --rest "$rest" \
	2>&1 | tee "$base.log" >&2
rc=${PIPESTATUS[0]}
if ! kill -0 "$daemon_pid" 2>/dev/null; then
	echo "run.sh: gpusliced died during the run:" >&2
	tail -n 30 "$tmp/gpusliced.log" >&2
	rc=1
fi
exit $rc
