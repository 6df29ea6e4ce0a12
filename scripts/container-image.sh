#!/bin/bash
# container-image.sh: the container image the container suite runs
# (tests/containers): a Debian 11 (bullseye, glibc 2.31) root made with
# debootstrap, with the test's CUDA program added, packed as squashfs, the
# image format enroot and Apptainer both run from a local file.
#
#   container-image.sh build OUT.sqsh CACHE PROGRAM...
#
# PROGRAMs (built for glibc 2.31) go to /usr/local/bin in the image. The
# bare root is kept in CACHE as a tarball keyed by suite, mirror and LAYOUT
# (bump LAYOUT when what a root holds changes). Exit status 3: the archive
# could not be reached; OUT's directory then holds UNREACHABLE with the
# reason. Needs root (debootstrap).
set -euo pipefail

SUITE=${IMAGE_SUITE:-bullseye}
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
LAYOUT=1
log() { printf 'container-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

build() {
	local out=$1 cache=$2; shift 2
	local here top tarball work
	here=$(dirname "$0")
	top=$(dirname "$out")
	tarball=$cache/$SUITE-root-$(echo "$SUITE $MIRROR $LAYOUT" | sha256sum | cut -c1-16).tar.zst
	work=$out.root
	mkdir -p "$top"
	rm -rf "$work" "$top/UNREACHABLE"

	if "$here/tree-cache.sh" unpack "$tarball" "$work"; then
		log "unpacked cached root $tarball"
	else
		"$here/debootstrap.sh" "$SUITE" "$MIRROR" "$work" "$top/UNREACHABLE" || exit $?
		# What a container never uses: downloaded packages, documentation.
		rm -rf "$work"/var/cache/apt/archives/*.deb "$work"/var/lib/apt/lists/* \
			"$work"/usr/share/doc/* "$work"/usr/share/man/* "$work"/usr/share/locale/* \
			"$work"/var/log/*.log
		log "saving $tarball"
		"$here/tree-cache.sh" save "$tarball" "$work" "$SUITE-root-*.tar.zst"
	fi
	[ -e "$work/lib/x86_64-linux-gnu/libc.so.6" ] || die "no libc in the $SUITE root"
	# No device nodes: container images carry none (the runtime gives the
	# container its /dev), and a user cannot unpack them (enroot create).
	find "$work/dev" -mindepth 1 -delete
	for p in "$@"; do
		install -m 0755 "$p" "$work/usr/local/bin/"
	done
	rm -f "$out.tmp"
	mksquashfs "$work" "$out.tmp" -noappend -all-root -no-progress -quiet -processors "$(nproc)" >/dev/null
	mv "$out.tmp" "$out"
	rm -rf "$work"
}

case ${1:-} in
build) shift; [ $# -ge 2 ] || die "usage: $0 build OUT.sqsh CACHE [PROGRAM...]"; build "$@" ;;
*) die "usage: $0 build OUT.sqsh CACHE [PROGRAM...]" ;;
esac
