#!/usr/bin/env bash
# build-dir.sh ROOT: print the build directory for the checkout at ROOT
# (the Makefile's BUILD when the command line and environment give none).
#
# It is ROOT/build, unless make runs as root and ROOT is closed to other
# users (a clone under /root, mode 0700). The tests run what they build as
# other users: job users, Slurm's, the test users. Those users cannot enter
# such a checkout, so its build directory is kept at
#   /var/cache/gpuslice-build/<hash of ROOT>/build
# and ROOT/build is a link to it: paths in the README still work. A real
# ROOT/build from an earlier run is moved there. A checkout without a
# build/ starts from an empty one, so a fresh clone at a path used before
# never reuses the old outputs, and the directories of checkouts that are
# gone are removed. `make clean` removes the directory and the link. GPUSLICE_BUILD_HOME replaces /var/cache/gpuslice-build (tests).
set -u
root=${1:?usage: build-dir.sh ROOT}
default=$root/build

# Only root can run the tests that need it, and only root can ask the
# question as another user.
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null ||
	setpriv --reuid=65534 --regid=65534 --clear-groups -- test -x "$root" 2>/dev/null; then
	echo "$default"
	exit 0
fi

hash=$(printf '%s' "$root" | sha256sum | cut -c1-12)
home=${GPUSLICE_BUILD_HOME:-/var/cache/gpuslice-build}
target=$home/$hash/build

# What to keep: a real build/ from an earlier run, or the directory an
# earlier link of ours names (the checkout was moved from another path).
src=
if [ -L "$default" ]; then
	link=$(readlink "$default")
	if [ "$link" = "$target" ]; then
		mkdir -p "$target"
		echo "$target"
		exit 0
	fi
	case $link in
	"$home"/*/build) ;;
	*) # A link someone else made: theirs to arrange.
		echo "$default"
		exit 0
		;;
	esac
	[ -d "$link" ] && src=$link
	rm -f "$default"
elif [ -d "$default" ]; then
	src=$default
fi

fail() {
	echo "build-dir.sh: $*; using $default, where the tests' other users cannot reach it" >&2
	echo "$default"
	exit 0
}
rm -rf "$home/$hash" || fail "cannot clear $home/$hash"
mkdir -p "$home/$hash" || fail "cannot create $home/$hash"
chmod 0755 "$home" "$home/$hash"
if [ -n "$src" ]; then
	mv "$src" "$target" || fail "cannot move $src to $target"
	[ "$src" = "$default" ] || rm -rf "${src%/build}"
	what="$src moved there"
else
	mkdir -m 0755 "$target" || fail "cannot create $target"
	what="created"
fi
chmod 0755 "$target"
ln -s "$target" "$default" || fail "cannot link $default to $target"
printf '%s\n' "$root" >"$home/$hash/origin"

# Directories of checkouts that are gone (a CI clone removed after its
# run), or whose build/ no longer links to them, are removed: each holds
# a whole build. An entry counts once its origin file is written (after
# its link).
for o in "$home"/*/origin; do
	[ -f "$o" ] || continue
	d=${o%/origin}
	[ "$(readlink "$(cat "$o")/build" 2>/dev/null)" = "$d/build" ] || rm -rf "$d"
done
echo "build-dir.sh: other users cannot enter $root, and the tests run its build outputs as other users: build/ is a link to $target ($what)" >&2
echo "$target"
