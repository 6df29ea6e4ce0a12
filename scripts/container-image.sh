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
	local top key tarball work
	top=$(dirname "$out")
	key=$(echo "$SUITE $MIRROR $LAYOUT" | sha256sum | cut -c1-16)
	tarball=$cache/$SUITE-root-$key.tar.zst
	work=$out.root
	mkdir -p "$top"
	rm -rf "$work" "$top/UNREACHABLE"
	mkdir -p "$work"

	if [ -f "$tarball" ]; then
		log "unpacking cached root $tarball"
		tar --zstd -xpf "$tarball" -C "$work" --numeric-owner
	else
		log "debootstrap $SUITE (minbase) from $MIRROR"
		local outp
		if ! outp=$(debootstrap --variant=minbase --components=main "$SUITE" "$work" "$MIRROR" 2>&1); then
			printf '%s\n' "$outp" | tail -n 20 >&2
			rm -rf "$work"
			if grep -qiE 'Failed getting release file|Couldn.t download|unable to resolve|Temporary failure|Could not resolve|Connection (refused|timed out)|Network is unreachable' <<<"$outp"; then
				printf 'Debian archive %s unreachable for %s: %s\n' "$MIRROR" "$SUITE" \
					"$(grep -iE 'Failed|download|resolve|refused|timed out|unreachable' <<<"$outp" | head -n 3 | tr '\n' ' ')" \
					>"$top/UNREACHABLE"
				exit 3
			fi
			die "debootstrap failed"
		fi
		# What a container never uses: downloaded packages, documentation.
		rm -rf "$work"/var/cache/apt/archives/*.deb "$work"/var/lib/apt/lists/* \
			"$work"/usr/share/doc/* "$work"/usr/share/man/* "$work"/usr/share/locale/* \
			"$work"/var/log/*.log
		mkdir -p "$cache"
		log "saving $tarball"
		tar --zstd -cpf "$tarball.tmp" -C "$work" --numeric-owner --one-file-system .
		mv "$tarball.tmp" "$tarball"
		find "$cache" -maxdepth 1 -name "$SUITE-root-*.tar.zst" ! -name "$(basename "$tarball")" -delete
	fi
	[ -x "$work/lib/x86_64-linux-gnu/libc.so.6" ] || [ -e "$work/lib/x86_64-linux-gnu/libc.so.6" ] ||
		die "no libc in the $SUITE root"
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
