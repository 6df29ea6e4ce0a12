#!/bin/sh
# Build the gpuslice and gpuslice-fakecuda packages from the programs
# already built into the build directory: the .deb with nfpm
# (packaging/nfpm), the .rpm with rpmbuild and packaging/gpuslice.spec,
# which also builds them from the release tarball (rpmbuild -ta,
# docs/build-packages.md).
#
# Usage: packaging/build-packages.sh VERSION OUTDIR [FORMAT...]
#   VERSION  package version, already valid for dpkg and rpm (packaging/version.sh)
#   OUTDIR   where the packages go (created; older gpuslice packages removed)
#   FORMAT   deb and/or rpm (default: deb rpm): one package per distribution
#            family, for every supported Slurm release; or stage alone:
#            OUTDIR gets what the packages are made of (stage/: the programs
#            and libraries stripped, spank-releases/RELEASE/gpuslice.so;
#            man/, third-party-licenses.txt), which the spec installs
# gpuslice carries the SPANK plugin built for each Slurm release, in
# /usr/lib/gpuslice/spank/RELEASE/gpuslice.so: build/spank (22.05, Debian 12's),
# build/spank-24.11 (Debian 13's) and build/spank/RELEASE (SchedMD's, make
# spank-releases); each directory's slurm-version names its release. Its
# scripts run `gpuslice slurm-plugin`, which links the one for the host's
# Slurm and enables its plugstack.conf line (docs/install.md), when the
# package is installed and after every Slurm upgrade: a dpkg trigger on
# Debian's Slurm plugin directory, and %triggerin/%triggerpostun on the slurm
# and slurm-ohpc RPMs (the spec's).
# Environment:
#   BUILD                    build directory (default: <repo>/build)
#   GO                       go command (default: go)
#   GPUSLICE_SLURM_RELEASES  the releases the package must carry, e.g.
#                            "22.05 23.11 24.05 24.11 25.05 25.11 26.05" (make
#                            packages passes every one it could build); a
#                            missing plugin fails. Default: every plugin
#                            directory found (22.05's at least, unless
#                            GPUSLICE_PLUGIN_DIRS is set).
#   GPUSLICE_PLUGIN_DIRS     the plugin directories (each gpuslice.so and
#                            slurm-version), instead of those of BUILD; of
#                            two for one release the later one is taken (the
#                            release tarball: its shipped plugins, then the
#                            one built against the host's Slurm headers)
#   GPUSLICE_PKG_MAINTAINER  Maintainer field
#   SOURCE_DATE_EPOCH        timestamps (default: time of the HEAD commit)
# nfpm is pinned in tools/go.mod (vendored in the release tarball) and run
# as `go tool nfpm` from tools/.
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
	deb | rpm) ;;
	stage) [ "$formats" = stage ] || { echo "build-packages: stage goes alone" >&2; exit 2; } ;;
	*) echo "build-packages: unknown package format '$f' (want deb, rpm or stage)" >&2; exit 2 ;;
	esac
done
if ! printf '%s\n' "$version" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	echo "build-packages: '$version' is not a valid package version (see packaging/version.sh)" >&2
	exit 2
fi

# Everything the two packages ship; fail with the whole list of what is missing.
go_programs="bin/gpusliced bin/gpuslice bin/gpuslice-prolog bin/gpuslice-epilog"
gpuslice_elf="$go_programs bin/gpuslice-ctxprobe lib/libgpuslice.so"
fakecuda_elf="lib/libcuda.so.1 lib/libcudart.so.12 lib/libnvidia-ml.so.1"
missing=
for f in $gpuslice_elf $fakecuda_elf; do
	[ -f "$build/$f" ] || missing="$missing
$build/$f"
done
for f in etc/gpusliced.yaml etc/plugstack.conf.d/gpuslice.conf etc/slurm/slurm.conf.fragment \
	etc/systemd/gpusliced.service docs/install.md LICENSE; do
	[ -f "$root/$f" ] || missing="$missing
$root/$f"
done
[ -d "$build/examples" ] || missing="$missing
$build/examples/"

# release_of DIR: the Slurm release (e.g. 24.11) of the plugin in DIR, from
# its slurm-version (the SLURM_VERSION_NUMBER of the headers it was built
# against: a plugin loads only into that major.minor release).
release_of() {
	n=$(cat "$1/slurm-version")
	case $n in
	0x[0-9a-fA-F]*) ;;
	*) echo "build-packages: $1/slurm-version: '$n' is not a SLURM_VERSION_NUMBER" >&2; exit 1 ;;
	esac
	printf '%d.%02d\n' $(( (n >> 16) & 255 )) $(( (n >> 8) & 255 ))
}

# The plugin directories, as "RELEASE DIR" lines; a later directory of a
# release replaces an earlier one.
dirs=${GPUSLICE_PLUGIN_DIRS-}
if [ -z "$dirs" ]; then
	dirs="$build/spank $build/spank-24.11 $(cd "$build" && ls -d spank/[0-9]*.[0-9]* 2>/dev/null | sed "s|^|$build/|")"
fi
plugin_dirs=
for d in $dirs; do
	if [ -f "$d/gpuslice.so" ] && [ -f "$d/slurm-version" ]; then
		r=$(release_of "$d")
		plugin_dirs="$(echo "$plugin_dirs" | awk -v r="$r" 'NF && $1 != r')
$r $d"
	fi
done
releases=${GPUSLICE_SLURM_RELEASES:-$(echo "$plugin_dirs" | awk 'NF { print $1 }' | sort -V)}
if [ -z "${GPUSLICE_PLUGIN_DIRS-}" ]; then
	case " $(echo $releases) " in
	*" 22.05 "*) ;;
	*) missing="$missing
$build/spank/gpuslice.so (Slurm 22.05: make spank)" ;;
	esac
elif [ -z "$releases" ]; then
	missing="$missing
a SPANK plugin (none in $dirs)"
fi
for r in $releases; do
	if ! echo "$plugin_dirs" | awk -v r="$r" '$1 == r { found = 1 } END { exit !found }'; then
		case $r in
		24.11) missing="$missing
$build/spank-24.11/gpuslice.so (make spank-24.11)" ;;
		*) missing="$missing
$build/spank/$r/gpuslice.so (make spank-$r)" ;;
		esac
	fi
done
if [ -n "$missing" ]; then
	echo "build-packages: missing inputs (run make build, make spank-releases):" >&2
	echo "$missing" | sed '/^$/d; s/^/  /' >&2
	exit 1
fi

if [ "$formats" = stage ]; then
	mkdir -p "$outdir"
	work=$(cd "$outdir" && pwd)
	rm -rf "$work/stage" "$work/man"
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-pkg.XXXXXX")
	trap 'rm -rf "$work"' EXIT INT TERM
fi

: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

# Newest GLIBC_x.y symbol version the given ELF files need: the floor of the
# C library dependency. Only the symbols they import count: the interceptor
# defines dlsym@GLIBC_2.34 itself, whatever C library it was built with.
glibc_min() {
	v=$(for f in "$@"; do objdump -T "$build/$f"; done | grep '[*]UND[*]' | grep -o 'GLIBC_[0-9][0-9.]*' |
		sed 's/^GLIBC_//' | sort -u -V | tail -n 1)
	echo "${v:-2.17}"
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
	# The release tarball's modules are in vendor/ (go mod vendor keeps
	# their license files).
	vendor=
	[ -f "$root/vendor/modules.txt" ] && vendor=$root/vendor
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
		[ -z "$vendor" ] || dir=$vendor/$mod
		if [ ! -d "$dir" ] && [ -z "$vendor" ]; then
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
amd64) GPUSLICE_DEB_MULTIARCH=x86_64-linux-gnu; rpm_arch() { echo x86_64; } ;;
arm64) GPUSLICE_DEB_MULTIARCH=aarch64-linux-gnu; rpm_arch() { echo aarch64; } ;;
ppc64le) GPUSLICE_DEB_MULTIARCH=powerpc64le-linux-gnu; rpm_arch() { echo ppc64le; } ;;
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
if [ "$formats" != stage ]; then
	changelog gpuslice gpuslice 1
	changelog gpuslice-fakecuda gpuslice-fakecuda 1
fi
manpages
third_party_licenses
stage $gpuslice_elf $fakecuda_elf $example_elf

# The plugin of each release, /usr/lib/gpuslice/spank/RELEASE/gpuslice.so
# (the packages' tree), stripped as dh_strip does.
for r in $releases; do
	d=$(echo "$plugin_dirs" | awk -v r="$r" '$1 == r { print $2; exit }')
	mkdir -p "$stage/spank-releases/$r"
	cp "$d/gpuslice.so" "$stage/spank-releases/$r/gpuslice.so"
	strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/spank-releases/$r/gpuslice.so"
done
chmod 0755 "$stage/spank-releases" "$stage/spank-releases"/*
chmod 0644 "$stage/spank-releases"/*/gpuslice.so
find "$stage/spank-releases" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

[ "$formats" != stage ] || exit 0

# nfpm expands the environment in file sources, not in the deb triggers:
# the configuration is written out with the multiarch directory in place.
case " $formats " in
*" deb "*)
	for pkg in gpuslice gpuslice-fakecuda; do
		sed "s|\${GPUSLICE_DEB_MULTIARCH}|$GPUSLICE_DEB_MULTIARCH|g" "$root/packaging/nfpm/$pkg.yaml" >"$work/$pkg.yaml"
	done
	nfpm=$(cd "$root/tools" && "$GO" tool -n nfpm) || {
		echo "build-packages: cannot build nfpm (tools/go.mod)" >&2
		exit 1
	}
	;;
esac

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
cd "$root"
for fmt in $formats; do
	case $fmt in
	deb)
		for pkg in gpuslice gpuslice-fakecuda; do
			case $pkg in
			gpuslice) elf=$gpuslice_elf ;;
			*) elf="$fakecuda_elf $example_elf" ;;
			esac
			GPUSLICE_BUILD=$stage
			GPUSLICE_PKG_RELEASE=1
			GPUSLICE_DEB_CHANGELOG=$work/$pkg/changelog.Debian.gz
			# The floor of the C library: what the programs and the
			# interceptor need. Each Slurm release's plugin needs its own
			# build's, which gpuslice slurm-plugin checks on the host.
			GPUSLICE_GLIBC_MIN=$(glibc_min $elf)
			rm -f "$outdir/${pkg}_"*.deb
			export GPUSLICE_BUILD GPUSLICE_PKG_RELEASE GPUSLICE_DEB_CHANGELOG GPUSLICE_GLIBC_MIN
			"$nfpm" package --config "$work/$pkg.yaml" \
				--packager deb --target "$outdir/" >"$work/nfpm.log" 2>&1 || {
				cat "$work/nfpm.log" >&2
				echo "build-packages: nfpm failed for $pkg (deb)" >&2
				exit 1
			}
		done
		;;
	rpm)
		# The spec of the release tarball, with %prep and %build skipped:
		# it installs the staged tree and the checkout's files. Its
		# BuildRequires (Go, gcc, slurm-devel) are not RPMs here.
		rm -f "$outdir/gpuslice-"[0-9]*.rpm "$outdir/gpuslice-fakecuda-"[0-9]*.rpm
		rpmbuild -bb --nodeps --quiet \
			--define "_topdir $work/rpmbuild" \
			--define "gpuslice_version $version" \
			--define "gpuslice_work $work" \
			--define "gpuslice_src $root" \
			--define "glibc_min $(glibc_min $gpuslice_elf)" \
			--define "fakecuda_glibc_min $(glibc_min $fakecuda_elf $example_elf)" \
			--define "_buildhost gpuslice" \
			"$root/packaging/gpuslice.spec" >"$work/rpmbuild.log" 2>&1 || {
			cat "$work/rpmbuild.log" >&2
			echo "build-packages: rpmbuild failed" >&2
			exit 1
		}
		mv "$work/rpmbuild/RPMS/$(rpm_arch)/"*.rpm "$outdir/"
		;;
	esac
done
ls -1 "$outdir"/gpuslice*_"$version"-1_*.deb "$outdir"/gpuslice*-"$version"-1.*.rpm 2>/dev/null || true
