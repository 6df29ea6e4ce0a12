#!/usr/bin/env bash
# run-together.sh LOGDIR TARGET...: runs `$MAKE TARGET` for every TARGET at
# once, each writing LOGDIR/TARGET.log, and prints each log whole when its
# run ends, so that one run's output is never interleaved with another's.
# Exits 1 when any failed, after all have ended.
set -uo pipefail
logs=$1
shift
mkdir -p "$logs"
declare -A target
for t in "$@"; do
	${MAKE:-make} --no-print-directory "$t" >"$logs/$t.log" 2>&1 &
	target[$!]=$t
	echo "run-together: $t started, log in $logs/$t.log"
done
start=$SECONDS
rc=0
for _ in "$@"; do
	wait -n -p pid
	st=$?
	t=${target[$pid]}
	echo "----- $t: exit $st after $((SECONDS - start)) s -----"
	cat "$logs/$t.log"
	[ "$st" = 0 ] || rc=1
done
exit $rc
