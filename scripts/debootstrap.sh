#!/bin/bash
# debootstrap.sh SUITE MIRROR DIR UNREACHABLE: a minimal Debian root of
# SUITE (debootstrap --variant=minbase, main only) from MIRROR in DIR.
# Exit status 3 when the archive cannot be reached: the file UNREACHABLE
# then says why and DIR is gone. Any other failure: exit status 1, the tail
# of debootstrap's output on stderr. Needs root.
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 SUITE MIRROR DIR UNREACHABLE" >&2; exit 2; }
suite=$1 mirror=$2 dir=$3 unreachable=$4

echo "debootstrap: $suite (minbase) from $mirror" >&2
if out=$(debootstrap --variant=minbase --components=main "$suite" "$dir" "$mirror" 2>&1); then
	exit 0
fi
printf '%s\n' "$out" | tail -n 20 >&2
rm -rf "$dir"
if grep -qiE 'Failed getting release file|Couldn.t download|unable to resolve|Temporary failure|Could not resolve|Connection (refused|timed out)|Network is unreachable' <<<"$out"; then
	printf 'Debian archive %s unreachable for %s: %s\n' "$mirror" "$suite" \
		"$(grep -iE 'Failed|download|resolve|refused|timed out|unreachable' <<<"$out" | head -n 3 | tr '\n' ' ')" \
		>"$unreachable"
	exit 3
fi
echo "debootstrap: $suite failed" >&2
exit 1
