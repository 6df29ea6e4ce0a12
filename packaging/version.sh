#!/bin/sh
# Turn a `git describe --tags --always --dirty` string (leading v optional)
# into a version that dpkg and rpm both accept and order correctly:
#   1.2.3                 -> 1.2.3
#   1.2.3-rc1             -> 1.2.3~rc1              (sorts before 1.2.3)
#   1.2.3-4-gabc1234      -> 1.2.3+git4.abc1234     (after 1.2.3, before 1.2.4)
#   abc1234 (no tag)      -> 0.0.0~git<UTC commit time>.abc1234
#   ...-dirty             -> ...+dirty (or .dirty after a +)
# Usage: version.sh [DESCRIBE]   (default: git describe of this repository,
# or in a release tarball its packaging/VERSION, written by make dist)
set -eu
here=$(dirname "$0")
v=${1-}
if [ -z "$v" ] && [ -f "$here/VERSION" ]; then
	v=$(cat "$here/VERSION")
fi
if [ -z "$v" ]; then
	v=$(git -C "$here/.." describe --tags --always --dirty 2>/dev/null || echo 0.0.0)
fi
v=${v#v}

dirty=
case $v in
*-dirty) dirty=1; v=${v%-dirty} ;;
esac

if printf '%s\n' "$v" | grep -Eq '^[0-9a-f]{7,40}$'; then
	# A bare commit hash: no tag reachable. Order snapshots by commit time.
	stamp=$(TZ=UTC git -C "$here/.." log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S "$v" 2>/dev/null || echo 0)
	v="0.0.0~git$stamp.$v"
elif printf '%s\n' "$v" | grep -Eq '^[0-9][0-9A-Za-z.~]*-[0-9]+-g[0-9a-f]+$'; then
	v=$(printf '%s\n' "$v" | sed -E 's/^(.*)-([0-9]+)-g([0-9a-f]+)$/\1+git\2.\3/')
fi
v=$(printf '%s\n' "$v" | tr '-' '~')

if [ -n "$dirty" ]; then
	case $v in
	*+*) v="$v.dirty" ;;
	*) v="$v+dirty" ;;
	esac
fi

if ! printf '%s\n' "$v" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	echo "version.sh: cannot make a package version from '$v'" >&2
	exit 1
fi
printf '%s\n' "$v"
