#!/bin/bash
# container-src.sh: the source tree of one container runtime at a pinned
# commit, for mk/containers.mk.
#
#   container-src.sh NAME COMMIT MIRROR CACHE DIR
#
# The tree comes from CACHE/NAME-COMMIT.tar.gz when it is there, else from
# the bare git repository MIRROR (a clone or the search tool's fetch of the
# public repository, /work/.mirror/OWNER+NAME/repo), which is then archived
# into CACHE so that later builds (CI's fresh clones) need no network and no
# mirror. DIR is replaced by the tree and DIR/.commit names the commit.
# Exit status 3: neither the tarball nor the commit in a mirror is here; the
# reason is on stderr.
set -euo pipefail
[ $# = 5 ] || { echo "usage: $0 NAME COMMIT MIRROR CACHE DIR" >&2; exit 2; }
name=$1 commit=$2 mirror=$3 cache=$4 dir=$5
tarball=$cache/$name-$commit.tar.gz

if [ ! -f "$tarball" ]; then
	if ! git -C "$mirror" cat-file -e "$commit^{commit}" 2>/dev/null; then
		echo "$name: no source: neither $tarball nor commit $commit in a git mirror at $mirror (GitHub is not reachable from here; fetch the repository into the mirror, or copy the tarball into $cache)" >&2
		exit 3
	fi
	mkdir -p "$cache"
	git -C "$mirror" archive --format=tar.gz --prefix="$name/" -o "$tarball.tmp" "$commit"
	mv "$tarball.tmp" "$tarball"
fi
rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp"
tar -xzf "$tarball" -C "$dir.tmp"
mv "$dir.tmp/$name" "$dir"
rmdir "$dir.tmp"
echo "$commit" >"$dir/.commit"
