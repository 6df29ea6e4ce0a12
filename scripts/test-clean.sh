#!/usr/bin/env bash
# make test-clean: remove what this project's test suites can leave on a
# machine (a run killed half-way, a hand run of one suite), so that the next
# `make test` starts from what a fresh machine has. It removes only what
# the tests create, known by name:
#   - processes started by the tests: gpusliced, and slurmctld, slurmd,
#     slurmdbd, munged, mariadbd and prometheus run from the tests'
#     directories (never the machine's own services);
#   - gpuslice run's cgroups (gpuslice-run-*), the Slurm test hosts'
#     cgroup v2 subtrees (gs8-*, gs13-*), mounts under the tests'
#     directories, the test hosts' network
#     namespaces, bridges and veths (gs8-*, gs13-*), their lock files;
#   - the test users (internal/testenv/users.go: those whose comment is
#     "gpuslice test user", and the names earlier versions used);
#   - installed gpuslice packages (tests/packaging installs and purges
#     them) and their state: /etc/gpuslice, /var/lib/gpuslice,
#     /run/gpuslice;
#   - the tests' directories in /tmp and fakecuda's shared state in /dev/shm;
#   - the container suites' interceptor copies (/run/gsct-lib-*) and the
#     enroot wrapper tests/slurm puts in /usr/local/bin (it names itself).
# It needs root. It leaves build/ alone (`make clean` removes that).
set -u

if [ "$(id -u)" != 0 ]; then
	echo "test-clean: needs root (it removes test users, packages and network namespaces)" >&2
	exit 1
fi

say() { echo "test-clean: $*"; }

# The tests' directories (MkdirTemp prefixes in tests/, internal/testenv,
# daemon/ and internal/debroot).
tmp_globs=(/tmp/gpuslice-* /tmp/gsgpu.* /tmp/gs[0-9]* /tmp/gsp[0-9]* /tmp/gspkg[0-9]* /tmp/gsuser[0-9]*
	/tmp/gssec[0-9]* /tmp/gsipc[0-9]* /tmp/gsct-*)

# This script's own ancestors (make, .ci/run) are never touched.
declare -A keep
p=$$
while [ -n "$p" ] && [ "$p" != 0 ]; do
	keep[$p]=1
	p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
done

# --- processes ----------------------------------------------------------
test_process() { # pid: is it one the tests started?
	local exe cmd
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
	cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
	case "${exe##*/}" in
	gpusliced | gpuslice-ctxprobe) return 0 ;;
	slurmctld | slurmd | slurmdbd | slurmstepd | munged | mariadbd | prometheus)
		case "$cmd" in */tmp/gpuslice-* | */tmp/gs[0-9]* | */build/trixie/*) return 0 ;; esac
		;;
	esac
	case "$exe" in */build/bin/* | */build/examples/* | */build/tests/*) return 0 ;; esac
	return 1
}
for sig in TERM KILL; do
	found=0
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[ -n "${keep[$pid]:-}" ] && continue
		if test_process "$pid"; then
			[ "$sig" = TERM ] && say "stopping $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null | cut -c1-120) (pid $pid)"
			kill -s "$sig" "$pid" 2>/dev/null && found=1
		fi
	done
	[ "$found" = 0 ] && break
	sleep 2
done

# --- mounts ---------------------------------------------------------------
# Deepest first; lazily, so a busy mount does not stop the rest.
awk '{print $2}' /proc/mounts | grep -E '^(/tmp/(gpuslice-|gs[0-9]|gsp[0-9]|gspkg|gsuser|gssec|gsipc)|/run/netns/gs(8|13)-)' |
	sort -r | while read -r m; do
	say "unmounting $m"
	umount -l "$m" 2>/dev/null
done

# --- gpuslice run's cgroups ------------------------------------------------
for cg in /sys/fs/cgroup/gpuslice-run-* /sys/fs/cgroup/unified/gpuslice-run-*; do
	[ -d "$cg" ] || continue
	say "removing cgroup $cg"
	while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$cg/cgroup.procs"
	for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
done

# --- the Slurm test hosts' cgroup subtrees ----------------------------------
# Each holds a node's slurmd, steps and jobs: kill them all, then remove
# the directories deepest first.
for cg in /sys/fs/cgroup/gs8-* /sys/fs/cgroup/gs13-* /sys/fs/cgroup/unified/gs8-* /sys/fs/cgroup/unified/gs13-*; do
	[ -d "$cg" ] || continue
	say "removing cgroup tree $cg"
	echo 1 >"$cg/cgroup.kill" 2>/dev/null
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
		[ -d "$cg" ] || break
		sleep 0.2
	done
done

# --- network namespaces, bridges, veths -------------------------------------
if command -v ip >/dev/null; then
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^gs(8|13)-' | while read -r ns; do
		say "removing network namespace $ns"
		ip netns delete "$ns" 2>/dev/null
	done
	ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
		grep -E '^gs(8|13)(br0|h[0-9]+|c[0-9]+)$' | while read -r l; do
		say "removing link $l"
		ip link delete "$l" 2>/dev/null
	done
fi
# The directory the Apptainer test binds the nodes' GPU device nodes on
# (empty outside the nodes).
rmdir /dev/gs8-nvidia /dev/gs13-nvidia 2>/dev/null
rm -f /run/gpuslice-gs8-suite.lock /run/gpuslice-gs13-suite.lock /run/lock/gpuslice-test-users.lock

# --- packages ---------------------------------------------------------------
for pkg in gpuslice gpuslice-fakecuda; do
	st=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)
	if [ -n "$st" ] && [ "${st%not-installed}" = "$st" ]; then
		say "purging package $pkg ($st)"
		DEBIAN_FRONTEND=noninteractive dpkg --purge "$pkg" >/dev/null || say "dpkg --purge $pkg failed"
	fi
	if command -v rpm >/dev/null && rpm -q "$pkg" >/dev/null 2>&1; then
		say "erasing rpm $pkg"
		rpm -e --nodeps "$pkg" >/dev/null 2>&1 || say "rpm -e $pkg failed"
	fi
done
for d in /etc/gpuslice /var/lib/gpuslice /run/gpuslice /etc/slurm/plugstack.conf.d/gpuslice.conf; do
	if [ -e "$d" ]; then
		say "removing $d"
		rm -rf "$d"
	fi
done

# --- users ------------------------------------------------------------------
# Those made by internal/testenv (their comment), and the names earlier
# versions of the tests made without one.
users=$(awk -F: '$5 == "gpuslice test user" {print $1}' /etc/passwd)
for u in gsltest1 gsltest2 gpuslicetest1 gpuslicetest2; do
	grep -q "^$u:" /etc/passwd && users="$users $u"
done
for u in $(echo "$users" | tr ' ' '\n' | sort -u); do
	say "removing user $u"
	pkill -KILL -u "$u" 2>/dev/null
	userdel "$u" >/dev/null 2>&1 || say "userdel $u failed"
	if getent group "$u" >/dev/null; then
		groupdel "$u" >/dev/null 2>&1
	fi
done

# --- files ------------------------------------------------------------------
for f in "${tmp_globs[@]}" /dev/shm/fakecuda-* /dev/shm/gpuslice-* /run/gsct-lib-*; do
	[ -e "$f" ] || continue
	rm -rf "$f" 2>/dev/null || say "could not remove $f"
done
if grep -qs '^# gpuslice tests/slurm: enroot of the build' /usr/local/bin/enroot; then
	say "removing /usr/local/bin/enroot (the Slurm suite's wrapper)"
	rm -f /usr/local/bin/enroot
fi
say "done"
