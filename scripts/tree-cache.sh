#!/bin/bash
# tree-cache.sh: a built directory tree kept as one zstd tarball in the
# machine's cache of third-party parts (GPUSLICE_CACHE), which outlives a
# checkout: a fresh clone unpacks the tree instead of fetching and building
# it again. The caller names the tarball by a key that changes with what the
# tree holds.
#
#   tree-cache.sh unpack TARBALL DIR
#       DIR is replaced by the tree TARBALL holds (owners, modes kept).
#       Exit status 1, DIR untouched, when there is no TARBALL; exit status
#       1, DIR and TARBALL removed, when TARBALL cannot be read whole (the
#       caller builds the tree again and saves a good one).
#   tree-cache.sh save TARBALL DIR GLOB [TAR_OPTION...]
#       TARBALL is written from DIR, whole or not at all; the other tarballs
#       in its directory whose names match GLOB (older keys) are removed.
set -euo pipefail
die() { printf 'tree-cache: %s\n' "$*" >&2; exit 2; }

case ${1:-} in
unpack)
	[ $# = 3 ] || die "usage: $0 unpack TARBALL DIR"
	tarball=$2 dir=$3
	[ -f "$tarball" ] || exit 1
	rm -rf "$dir" "$dir.unpack"
	mkdir -p "$dir.unpack"
	if ! tar --zstd -xpf "$tarball" -C "$dir.unpack" --numeric-owner; then
		rm -rf "$dir.unpack" "$tarball"
		printf 'tree-cache: %s cannot be read; removed it, the tree is built again\n' "$tarball" >&2
		exit 1
	fi
	mv "$dir.unpack" "$dir"
	;;
save)
	[ $# -ge 4 ] || die "usage: $0 save TARBALL DIR GLOB [TAR_OPTION...]"
	tarball=$2 dir=$3 glob=$4
	shift 4
	cache=$(dirname "$tarball")
	mkdir -p "$cache"
	tar --zstd -cpf "$tarball.tmp.$$" -C "$dir" --numeric-owner --one-file-system "$@" .
	mv "$tarball.tmp.$$" "$tarball"
	find "$cache" -maxdepth 1 -name "$glob" ! -name "$(basename "$tarball")" -delete
	;;
*) die "usage: $0 unpack TARBALL DIR | save TARBALL DIR GLOB [TAR_OPTION...]" ;;
esac
