#!/bin/sh
# Build the gpuslice and gpuslice-fakecuda packages (.deb and .rpm) with nfpm
# from the programs already built into the build directory.
#
# Usage: packaging/build-packages.sh VERSION OUTDIR [FORMAT...]
#   VERSION  package version, already valid for dpkg and rpm (packaging/version.sh)
#   OUTDIR   where the packages go (created; older gpuslice packages removed)
#   FORMAT   deb, deb13 and/or rpm (default: deb rpm)
#            deb    Debian 12: gpuslice_<v>-1 and gpuslice-fakecuda_<v>-1, the
#                   plugin of build/spank (Slurm 22.05 there)
#            deb13  Debian 13: gpuslice_<v>-1+deb13 only (gpuslice-fakecuda is
#                   the same for both), the plugin of build/spank-24.11
#            rpm    EL: the plugin of build/spank
# Each plugin directory holds slurm-version, the SLURM_VERSION_NUMBER of the
# headers the plugin was built against; the .deb depends on that Slurm
# release (slurm-wlm-basic-plugins, which every Debian Slurm program needs).
# Environment:
#   BUILD                    build directory (default: <repo>/build)
#   GO                       go command (default: go)
#   GPUSLICE_PKG_MAINTAINER  Maintainer field
#   SOURCE_DATE_EPOCH        timestamps (default: time of the HEAD commit)
# nfpm is pinned in tools/go.mod and run as `go tool -modfile=tools/go.mod nfpm`.
set -eu

usage() {
	echo "usage: $0 VERSION OUTDIR [deb|rpm ...]" >&2
	exit 2
}
[ $# -ge 2 ] || usage

root=$(cd "$(dirname "$0")/.." && pwd)
version=$1
outdir=$2
shift 2
formats=${*:-deb rpm}
build=${BUILD:-$root/build}
GO=${GO:-go}

for f in $formats; do
	case $f in
	deb | deb13 | rpm) ;;
	*) echo "build-packages: unknown package format '$f' (want deb, deb13 or rpm)" >&2; exit 2 ;;
	esac
done
if ! printf '%s\n' "$version" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	echo "build-packages: '$version' is not a valid package version (see packaging/version.sh)" >&2
	exit 2
fi

# Everything the two packages ship; fail with the whole list of what is missing.
go_programs="bin/gpusliced bin/gpuslice bin/gpuslice-prolog bin/gpuslice-epilog"
gpuslice_elf="$go_programs bin/gpuslice-ctxprobe lib/libgpuslice.so spank/gpuslice.so"
fakecuda_elf="lib/libcuda.so.1 lib/libcudart.so.12 lib/libnvidia-ml.so.1"
missing=
for f in $gpuslice_elf $fakecuda_elf; do
	[ -f "$build/$f" ] || missing="$missing $build/$f"
done
for f in etc/gpusliced.yaml etc/plugstack.conf.d/gpuslice.conf etc/slurm/slurm.conf.fragment \
	etc/systemd/gpusliced.service docs/install.md LICENSE; do
	[ -f "$root/$f" ] || missing="$missing $root/$f"
done
[ -d "$build/examples" ] || missing="$missing $build/examples/"
plugin_dirs=spank
case " $formats " in *" deb13 "*) plugin_dirs="$plugin_dirs spank-24.11" ;; esac
for d in $plugin_dirs; do
	for f in $d/gpuslice.so $d/slurm-version; do
		[ -f "$build/$f" ] || missing="$missing $build/$f"
	done
done
if [ -n "$missing" ]; then
	echo "build-packages: missing inputs (run make build):" >&2
	for f in $missing; do echo "  $f" >&2; done
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-pkg.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

# Newest GLIBC_x.y symbol version the given ELF files need: the floor of the
# C library dependency.
glibc_min() {
	v=$(for f in "$@"; do objdump -T "$build/$f"; done | grep -o 'GLIBC_[0-9][0-9.]*' |
		sed 's/^GLIBC_//' | sort -u -V | tail -n 1)
	echo "${v:-2.17}"
}

# slurm_depends DIR: the Slurm release the plugin in DIR was built for, as
# GPUSLICE_SLURM_MIN (e.g. 24.11) and GPUSLICE_SLURM_NEXT (24.12): a plugin
# loads only into the major.minor release it was built for.
slurm_depends() {
	n=$(cat "$build/$1/slurm-version")
	case $n in
	0x[0-9a-fA-F]*) ;;
	*) echo "build-packages: $build/$1/slurm-version: '$n' is not a SLURM_VERSION_NUMBER" >&2; exit 1 ;;
	esac
	major=$(( (n >> 16) & 255 ))
	minor=$(( (n >> 8) & 255 ))
	GPUSLICE_SLURM_MIN=$(printf '%d.%02d' "$major" "$minor")
	GPUSLICE_SLURM_NEXT=$(printf '%d.%02d' "$major" $((minor + 1)))
	export GPUSLICE_SLURM_MIN GPUSLICE_SLURM_NEXT
}

# Debian changelog entry for this build (lintian wants one per package).
changelog() {
	pkg=$1
	dir=$2
	rev=$3
	mkdir -p "$work/$dir"
	{
		printf '%s (%s-%s) unstable; urgency=medium\n\n' "$pkg" "$version" "$rev"
		printf '  * Package of gpuslice %s.\n\n' "$version"
		printf ' -- %s  %s\n' "$GPUSLICE_PKG_MAINTAINER" \
			"$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	} >"$work/$dir/changelog.Debian"
	gzip -9n "$work/$dir/changelog.Debian"
}

# Manual pages, compressed as both formats expect.
manpages() {
	mkdir -p "$work/man"
	for m in docs/man/gpuslice.1 docs/man/gpusliced.8; do
		gzip -9n -c "$root/$m" >"$work/man/$(basename "$m").gz"
	done
}

# License texts of every Go module linked into the Go programs, read from the
# programs' own build information, plus the Go standard library's.
third_party_licenses() {
	out=$work/third-party-licenses.txt
	modcache=$("$GO" env GOMODCACHE)
	{
		echo "Licenses of the Go code statically linked into gpusliced, gpuslice,"
		echo "gpuslice-prolog and gpuslice-epilog."
		echo
		echo "==> Go standard library and runtime ($("$GO" env GOVERSION))"
		echo
		cat "$("$GO" env GOROOT)/LICENSE"
	} >"$out"
	for p in $go_programs; do
		"$GO" version -m "$build/$p"
	done | awk '$1 == "dep" || $1 == "=>" { if ($3 ~ /^v/) print $2 "@" $3 }' | sort -u >"$work/modules"
	while IFS= read -r mv; do
		mod=${mv%@*}
		ver=${mv##*@}
		enc=$(printf '%s' "$mod" | sed 's/[A-Z]/!&/g' | tr 'A-Z' 'a-z')
		dir=$modcache/$enc@$ver
		if [ ! -d "$dir" ]; then
			"$GO" mod download "$mod@$ver" >/dev/null 2>&1 || true
		fi
		files=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'LICENCE*' \
			-o -iname 'COPYING*' -o -iname 'NOTICE*' \) 2>/dev/null | sort)
		if [ -z "$files" ]; then
			echo "build-packages: no license file found for Go module $mv (in $dir)" >&2
			exit 1
		fi
		for f in $files; do
			printf '\n==> %s %s: %s\n\n' "$mod" "$ver" "${f##*/}"
			cat "$f"
		done >>"$out"
	done <"$work/modules"
}

# Copy the ELF files into the staging directory and strip them, as dh_strip
# does (the build directory keeps its debug information).
stage() {
	for f in "$@"; do
		mkdir -p "$stage/$(dirname "$f")"
		cp "$build/$f" "$stage/$f"
		case $f in
		*.so | *.so.*) strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/$f" ;;
		*) strip --remove-section=.comment --remove-section=.note "$stage/$f" ;;
		esac
	done
}

# Architecture of the programs (built for the host), and Debian's multiarch
# directory, under which Debian's slurmd looks for plugins (slurm-wlm/).
GPUSLICE_PKG_ARCH=$("$GO" env GOARCH)
case $GPUSLICE_PKG_ARCH in
amd64) GPUSLICE_DEB_MULTIARCH=x86_64-linux-gnu ;;
arm64) GPUSLICE_DEB_MULTIARCH=aarch64-linux-gnu ;;
ppc64le) GPUSLICE_DEB_MULTIARCH=powerpc64le-linux-gnu ;;
*) echo "build-packages: unsupported architecture $GPUSLICE_PKG_ARCH" >&2; exit 1 ;;
esac
export GPUSLICE_PKG_ARCH GPUSLICE_DEB_MULTIARCH

: "${GPUSLICE_PKG_MAINTAINER:=gpuslice maintainers <maintainers@gpuslice.invalid>}"
export GPUSLICE_PKG_MAINTAINER
export GPUSLICE_PKG_VERSION="$version"
stage=$work/stage
export GPUSLICE_PKG_WORK="$work"

# Example programs: the executables in build/examples.
example_elf=$(cd "$build" && find examples -maxdepth 1 -type f -perm -u+x | sort)
if [ -z "$example_elf" ]; then
	echo "build-packages: no example programs in $build/examples" >&2
	exit 1
fi
changelog gpuslice gpuslice 1
changelog gpuslice-fakecuda gpuslice-fakecuda 1
changelog gpuslice gpuslice-deb13 1+deb13
manpages
third_party_licenses
stage $gpuslice_elf $fakecuda_elf $example_elf

# Debian 13's gpuslice: the same staged files with the plugin built for
# its Slurm (hard links, no copies).
case " $formats " in
*" deb13 "*)
	stage13=$work/stage-deb13
	cp -al "$stage" "$stage13"
	rm "$stage13/spank/gpuslice.so"
	cp "$build/spank-24.11/gpuslice.so" "$stage13/spank/gpuslice.so"
	strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage13/spank/gpuslice.so"
	;;
esac

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
cd "$root"
for pkg in gpuslice gpuslice-fakecuda; do
	case $pkg in
	gpuslice) elf=$gpuslice_elf ;;
	*) elf="$fakecuda_elf $example_elf" ;;
	esac
	for fmt in $formats; do
		# Defaults: Debian 12 / EL.
		GPUSLICE_BUILD=$stage
		GPUSLICE_PKG_RELEASE=1
		GPUSLICE_DEB_CHANGELOG=$work/$pkg/changelog.Debian.gz
		GPUSLICE_GLIBC_MIN=$(glibc_min $elf)
		slurm_depends spank
		packager=$fmt
		case $fmt in
		deb)
			for f in "$outdir/${pkg}_"*.deb; do
				case $f in *+deb13_*) ;; *) rm -f "$f" ;; esac
			done
			;;
		deb13)
			[ "$pkg" = gpuslice ] || continue
			rm -f "$outdir/${pkg}_"*+deb13_*.deb
			packager=deb
			GPUSLICE_BUILD=$stage13
			GPUSLICE_PKG_RELEASE=1+deb13
			GPUSLICE_DEB_CHANGELOG=$work/gpuslice-deb13/changelog.Debian.gz
			GPUSLICE_GLIBC_MIN=$(glibc_min $(echo "$elf" | sed 's|spank/gpuslice.so|spank-24.11/gpuslice.so|'))
			slurm_depends spank-24.11
			;;
		rpm) rm -f "$outdir/$pkg-"[0-9]*.rpm ;;
		esac
		export GPUSLICE_BUILD GPUSLICE_PKG_RELEASE GPUSLICE_DEB_CHANGELOG GPUSLICE_GLIBC_MIN
		"$GO" tool -modfile="$root/tools/go.mod" nfpm package --config "packaging/nfpm/$pkg.yaml" \
			--packager "$packager" --target "$outdir/" >"$work/nfpm.log" 2>&1 || {
			cat "$work/nfpm.log" >&2
			echo "build-packages: nfpm failed for $pkg ($fmt)" >&2
			exit 1
		}
	done
done
ls -1 "$outdir"/gpuslice*_"$version"-1*_*.deb "$outdir"/gpuslice*-"$version"-1.*.rpm 2>/dev/null || true
