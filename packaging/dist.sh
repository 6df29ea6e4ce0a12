#!/bin/sh
# Write the release tarball gpuslice-VERSION.tar.gz: what a site's build
# host needs to build the packages offline (docs/build-packages.md):
#   - the sources: the commit checked out (HEAD), without uncommitted edits;
#   - vendor/ and tools/vendor/: the Go modules of the programs and of nfpm
#     (go mod vendor), so the build fetches nothing;
#   - gpuslice.spec at the top (rpmbuild -ta finds it), its version set;
#   - packaging/VERSION, which packaging/version.sh reads without git;
#   - spank/prebuilt/RELEASE/{gpuslice.so,slurm-version}: the SPANK plugin
#     built here for each supported Slurm release, for the releases the
#     build host has no headers of.
#
# Usage: packaging/dist.sh VERSION OUTDIR
# Environment:
#   BUILD                    build directory (default: <repo>/build)
#   GO                       go command (default: go)
#   GPUSLICE_SLURM_RELEASES  the releases whose plugin is shipped (default:
#                            every plugin directory of BUILD)
#   SOURCE_DATE_EPOCH        the files' time (default: time of the HEAD commit)
set -eu

[ $# -eq 2 ] || { echo "usage: $0 VERSION OUTDIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
version=$1
outdir=$2
build=${BUILD:-$root/build}
GO=${GO:-go}
if ! printf '%s\n' "$version" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	echo "dist: '$version' is not a valid package version (see packaging/version.sh)" >&2
	exit 2
fi
: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"

name=gpuslice-$version
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
top=$work/$name
mkdir -p "$top"

# The sources: the committed tree (git archive HEAD); what is not
# committed is not released.
git -C "$root" archive --format=tar HEAD | tar -xf - -C "$top"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
	echo "dist: the working tree has uncommitted changes; the tarball holds HEAD without them" >&2
fi

# The Go modules: the programs' and nfpm's.
(cd "$root" && GOFLAGS=-mod=mod "$GO" mod vendor -o "$top/vendor")
(cd "$root/tools" && GOFLAGS=-mod=mod "$GO" mod vendor -o "$top/tools/vendor")

printf '%s\n' "$version" >"$top/packaging/VERSION"
sed "s/@VERSION@/$version/" "$root/packaging/gpuslice.spec" >"$top/gpuslice.spec"
rm "$top/packaging/gpuslice.spec"

# The plugin of each release: build/spank (22.05), build/spank-24.11,
# build/spank/RELEASE (SchedMD's).
shipped=
for d in "$build/spank" "$build/spank-24.11" "$build"/spank/[0-9]*.[0-9]*; do
	[ -f "$d/gpuslice.so" ] && [ -f "$d/slurm-version" ] || continue
	n=$(cat "$d/slurm-version")
	r=$(printf '%d.%02d' $(( (n >> 16) & 255 )) $(( (n >> 8) & 255 )))
	if [ -n "${GPUSLICE_SLURM_RELEASES-}" ]; then
		case " $GPUSLICE_SLURM_RELEASES " in *" $r "*) ;; *) continue ;; esac
	fi
	mkdir -p "$top/spank/prebuilt/$r"
	cp "$d/gpuslice.so" "$d/slurm-version" "$top/spank/prebuilt/$r/"
	shipped="$shipped $r"
done
for r in ${GPUSLICE_SLURM_RELEASES-}; do
	[ -d "$top/spank/prebuilt/$r" ] || { echo "dist: no plugin for Slurm $r in $build (make spank-releases)" >&2; exit 1; }
done

mkdir -p "$outdir"
out=$(cd "$outdir" && pwd)/$name.tar.gz
(cd "$work" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
	-cf - "$name") | gzip -9n >"$out.tmp"
mv "$out.tmp" "$out"
echo "dist: $out (plugins shipped for Slurm$shipped)"
