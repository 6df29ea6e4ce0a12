#!/bin/bash
# trixie-root.sh: a Debian 13 (trixie) root with Slurm 24.11, munge, Lua and a
# C toolchain, made with debootstrap; and a way to run commands inside it.
# Its apt sources are main and contrib: Debian ships Slurm's gpu/nvml plugin
# (slurm-wlm-nvml-plugin) in contrib, since it links NVIDIA's NVML, which is
# in non-free. The plugin's files are unpacked into the root without its
# dependency on NVIDIA's library: the suites give slurmd fakecuda's NVML
# (LD_LIBRARY_PATH), as a node would have the driver's.
#
#   trixie-root.sh build ROOT CACHE PKG...   make ROOT (reuse CACHE's copy when its key matches)
#   trixie-root.sh run ROOT CMD [ARG...]     run CMD chrooted in ROOT with /proc, /sys, /dev
#
# run reads from the environment:
#   TRIXIE_BINDS  blank-separated HOST:GUEST[:ro] directories bind-mounted into
#                 the root (GUEST is created), e.g. the repository read-only
#   TRIXIE_ENV    blank-separated NAME=VALUE pairs given to CMD (CMD otherwise
#                 gets a clean environment: PATH, HOME, LANG)
#   TRIXIE_OVERLAY  a scratch directory: ROOT is seen through an overlay whose
#                 changes (packages installed, users added) go there and ROOT
#                 itself stays as built
#
# Every mount is made in a private mount namespace (unshare --mount): the
# mounts vanish with the namespace when the command ends, however it ends
# (error, signal, SIGKILL), and are never seen by the host. The explicit
# unmounts on exit are belt and braces.
#
# The cache holds one tarball of a finished root per key; the key hashes the
# suite, the mirror, the package list and LAYOUT, so changing any of them
# builds afresh. Bump LAYOUT when build() changes what a root holds.
#
# Exit status 3 from build means the archive could not be reached;
# ROOT/../UNREACHABLE then holds the reason.
set -euo pipefail

SUITE=${TRIXIE_SUITE:-trixie}
MIRROR=${TRIXIE_MIRROR:-http://deb.debian.org/debian}
LAYOUT=3
log() { printf 'trixie-root: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# inside ROOT CMD...: run CMD in ROOT in a private mount namespace.
inside() {
	local root=$1; shift
	[ -d "$root" ] || die "no root at $root"
	unshare --mount --propagation private -- /bin/bash -euc '
		root=$1; shift
		if [ -n "${TRIXIE_OVERLAY:-}" ]; then
			ov=$TRIXIE_OVERLAY
			mkdir -p "$ov/upper" "$ov/work" "$ov/merged"
			mount -t overlay overlay -o "lowerdir=$root,upperdir=$ov/upper,workdir=$ov/work" "$ov/merged"
			root=$ov/merged
		fi
		cleanup() {
			for b in ${TRIXIE_BINDS:-}; do
				IFS=: read -r _ dst _ <<<"$b"
				mountpoint -q "$root$dst" && umount -l "$root$dst" || true
			done
			for m in etc/hosts dev/pts dev/shm dev sys proc; do
				mountpoint -q "$root/$m" && umount -l "$root/$m" || true
			done
			[ -z "${TRIXIE_OVERLAY:-}" ] || umount -l "$root" || true
		}
		trap cleanup EXIT
		mount -t proc proc "$root/proc"
		mount --bind /sys "$root/sys" && mount -o remount,bind,ro "$root/sys"
		mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
		for d in null zero full random urandom tty; do
			touch "$root/dev/$d" && mount --bind "/dev/$d" "$root/dev/$d"
		done
		mkdir -p "$root/dev/pts" "$root/dev/shm"
		mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
		ln -sf pts/ptmx "$root/dev/ptmx"
		mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
		ln -sf /proc/self/fd "$root/dev/fd"
		# The root shares this machine'"'"'s network: it resolves its names
		# (this machine'"'"'s own, which Slurm looks up) as the machine does.
		touch "$root/etc/hosts" && mount --bind /etc/hosts "$root/etc/hosts"
		for b in ${TRIXIE_BINDS:-}; do
			IFS=: read -r src dst opt <<<"$b"
			mkdir -p "$root$dst"
			mount --bind "$src" "$root$dst"
			[ "$opt" != ro ] || mount -o remount,bind,ro "$root$dst"
		done
		rc=0
		env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive ${TERM:+TERM=$TERM} \
			${TRIXIE_ENV:-} chroot "$root" "$@" || rc=$?
		exit $rc
	' inside "$root" "$@"
}

cache_key() {
	echo "$SUITE $MIRROR $LAYOUT $*" | sha256sum | cut -c1-16
}

build() {
	local root=$1 cache=$2; shift 2
	# What run takes from the environment has no place in a build.
	unset TRIXIE_BINDS TRIXIE_ENV TRIXIE_OVERLAY
	local pkgs=("$@")
	local here top tarball work
	here=$(dirname "$0")
	top=$(dirname "$root")
	tarball=$cache/$SUITE-root-$(cache_key "${pkgs[@]}").tar.zst
	rm -f "$top/UNREACHABLE"
	mkdir -p "$top"

	if "$here/tree-cache.sh" unpack "$tarball" "$root"; then
		log "unpacked cached root $tarball"
		return 0
	fi

	work=$root.tmp
	rm -rf "$work"
	"$here/debootstrap.sh" "$SUITE" "$MIRROR" "$work" "$top/UNREACHABLE" || exit $?

	# debootstrap writes no /etc/hosts: without one "localhost" does not
	# resolve (mariadb-install-db, for one, refuses to run).
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$work/etc/hosts"
	# No service may start while packages are installed into the root.
	printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"
	chmod 0755 "$work/usr/sbin/policy-rc.d"
	printf 'deb %s %s main contrib\n' "$MIRROR" "$SUITE" >"$work/etc/apt/sources.list"
	log "installing ${pkgs[*]}"
	inside "$work" apt-get -qq update
	inside "$work" apt-get -qq -o Dpkg::Use-Pty=0 install --no-install-recommends -y "${pkgs[@]}" >/dev/null
	# gpu/nvml without NVIDIA's libnvidia-ml1 (non-free, and the driver's
	# own packages behind it): its files only, not known to dpkg.
	if inside "$work" sh -c 'cd /tmp && apt-get -qq download slurm-wlm-nvml-plugin && dpkg-deb -x slurm-wlm-nvml-plugin_*.deb / && rm -f slurm-wlm-nvml-plugin_*.deb'; then
		log "unpacked slurm-wlm-nvml-plugin (gpu/nvml)"
	else
		log "no slurm-wlm-nvml-plugin in $SUITE: the root has no gpu/nvml"
	fi
	inside "$work" apt-get -qq clean
	rm -rf "$work"/var/lib/apt/lists/* "$work"/var/cache/apt/*.bin "$work"/var/log/*.log "$work"/var/log/apt/*

	log "saving $tarball"
	"$here/tree-cache.sh" save "$tarball" "$work" "$SUITE-root-*.tar.zst"
	rm -rf "$root" && mv "$work" "$root"
}

case ${1:-} in
build) shift; [ $# -ge 3 ] || die "usage: $0 build ROOT CACHE PKG..."; build "$@" ;;
run) shift; [ $# -ge 2 ] || die "usage: $0 run ROOT CMD [ARG...]"; inside "$@" ;;
*) die "usage: $0 build ROOT CACHE PKG... | run ROOT CMD [ARG...]" ;;
esac
