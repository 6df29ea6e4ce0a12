#!/bin/bash
# The node a platform path of docs/install.md is followed on, inside a
# Debian root (tests/packaging/installpath_test.go writes the path's steps
# as a script that sources this file). What the page takes as given is
# made here, before its step 1:
#   - the node's hardware and driver: two stand-in GPU device files
#     (/dev/nvidia0, /dev/nvidia1: major 195, as NVIDIA's), the
#     gpuslice-fakecuda package and the environment install.md's "Without
#     a GPU" gives the daemon (its drop-in) and the jobs, and NVIDIA's
#     nvidia-smi from Debian's package, where Debian puts it;
#   - a running one-node Slurm cluster (munge, slurmctld, slurmd), its
#     slurm.conf without anything of gpuslice's;
#   - systemd: the root has none, so `systemctl` is a function of this
#     script: a unit is started when it is enabled (the links
#     deb-systemd-helper makes), restarted, stopped, disabled and its
#     status shown, each daemon in the foreground as its unit runs it.
#     gpusliced's command line and environment are read from its installed
#     unit and drop-ins.
# Environment: NODE (NodeName), CTLD_PORT, SLURMD_PORT, FAKEDEB (the
# gpuslice-fakecuda package), NVIDIA_SMI_DIR (Debian's nvidia-smi files,
# or empty); for a Slurm built from source, SLURM_TREE (the installed
# tree of a SchedMD release, read-only) and SLURM_PREFIX (the prefix it
# was built for): the node's Slurm is then that tree under /usr/local,
# as a build with SchedMD's defaults installs it, and the root's own
# Debian Slurm is purged first.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

fail() { echo "fail=$*"; exit 1; }

# run runs one command of the page as written, in this shell (so that the
# systemctl stand-in keeps its daemons), its output shown and kept in
# /tmp/run.out; the first that fails ends the run. A question it asks
# (apt's "Continue? [Y/n]") is answered yes, as the admin would.
run() {
	echo "+ [$(date +%T)] $1"
	local rc=0
	eval "$1" >/tmp/run.out 2>&1 <<<y || rc=$?
	cat /tmp/run.out
	[ $rc -eq 0 ] || fail "exit $rc: $1"
}

# ---- the stand-in for systemd -------------------------------------------
declare -A svc_pid=()
svc_unit() {
	local f
	for f in /usr/lib/systemd/system/$1.service /lib/systemd/system/$1.service; do
		[ -e "$f" ] && { cat "$f"; break; }
	done
	cat /etc/systemd/system/$1.service.d/*.conf 2>/dev/null || true
}
svc_enabled() { compgen -G "/etc/systemd/system/*.wants/$1.service" >/dev/null; }
svc_running() { [ -n "${svc_pid[$1]:-}" ] && kill -0 "${svc_pid[$1]}" 2>/dev/null; }
svc_start() {
	local name=$1 exec env=()
	svc_running "$name" && return 0
	case $name in
	munge)
		mkdir -p /run/munge && chown munge:munge /run/munge
		setpriv --reuid=munge --regid=munge --init-groups munged --foreground >>/var/log/munged.out 2>&1 &
		svc_pid[$name]=$!
		local i=0
		until [ -S /run/munge/munge.socket.2 ]; do
			i=$((i + 1)); [ $i -lt 75 ] || fail "munged did not start"; sleep 0.2
		done
		return 0 ;;
	slurmctld) slurmctld -D -i >>/var/log/slurm/slurmctld.out 2>&1 & ;;
	slurmd) slurmd -D >>/var/log/slurm/slurmd.out 2>&1 & ;;
	gpusliced)
		# ExecStart (the last: a drop-in's empty ExecStart= resets it) and
		# Environment of the unit and its drop-ins; RuntimeDirectory and
		# StateDirectory made first, as systemd does.
		exec=$(svc_unit gpusliced | sed -n 's/^ExecStart=//p' | tail -1)
		[ -n "$exec" ] || fail "gpusliced: no ExecStart in its unit"
		read -r -a env <<<"$(svc_unit gpusliced | sed -n 's/^Environment=//p' | tr '\n' ' ')"
		mkdir -p /run/gpuslice /var/lib/gpuslice && chmod 0700 /var/lib/gpuslice
		# shellcheck disable=SC2086
		env "${env[@]}" $exec >>/var/log/gpusliced.log 2>&1 &
		;;
	*) fail "systemctl: no unit $name here" ;;
	esac
	svc_pid[$name]=$!
}
svc_stop() {
	local p=${svc_pid[$1]:-} i=0
	[ -n "$p" ] || return 0
	kill "$p" 2>/dev/null || true
	while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	kill -9 "$p" 2>/dev/null || true
	unset "svc_pid[$1]"
}
systemctl() {
	local verb=$1 now=no; shift
	[ "${1:-}" = --now ] && { now=yes; shift; }
	local u=${1%.service}
	echo "systemctl $verb $u (stand-in)"
	case $verb in
	start) svc_start "$u" ;;
	stop) svc_stop "$u" ;;
	restart) svc_stop "$u"; svc_start "$u" ;;
	enable) mkdir -p /etc/systemd/system/multi-user.target.wants
		ln -sf "/usr/lib/systemd/system/$u.service" "/etc/systemd/system/multi-user.target.wants/$u.service"
		[ $now = no ] || svc_start "$u" ;;
	disable) rm -f /etc/systemd/system/*.wants/"$u".service
		[ $now = no ] || svc_stop "$u" ;;
	status) if svc_running "$u"; then echo "$u: active (running) since the stand-in started it, pid ${svc_pid[$u]}"
		else echo "$u: inactive (dead)"; return 3; fi ;;
	*) fail "systemctl $verb: not something the stand-in does" ;;
	esac
}
# boot_sync starts what is enabled and not running: what systemd does
# for a unit a package enables and starts (deb-systemd-invoke has no
# systemd to talk to here).
boot_sync() {
	if svc_enabled gpusliced && ! svc_running gpusliced; then
		echo "gpusliced enabled: started (stand-in for systemd)"
		svc_start gpusliced
		local i=0
		until gpuslice gpus >/dev/null 2>&1; do
			i=$((i + 1)); [ $i -lt 100 ] || { tail -n 20 /var/log/gpusliced.log; fail "gpusliced did not answer"; }
			sleep 0.2
		done
	fi
}
stop_all() {
	local u
	for u in slurmd slurmctld gpusliced munge; do svc_stop "$u"; done
}
trap stop_all EXIT

# wait_idle waits for the node to be idle in Slurm (after a restart).
wait_idle() {
	local i=0
	until [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; do
		i=$((i + 1))
		[ $i -lt 150 ] || { tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/gpusliced.log; fail "node not idle"; }
		sleep 0.2
	done
}

# wait_job_end waits for a job to leave squeue.
wait_job_end() {
	local i=0
	while squeue -h -j "$1" 2>/dev/null | grep -q .; do
		i=$((i + 1)); [ $i -lt 300 ] || fail "job $1 did not end"; sleep 0.2
	done
}

# ---- the node before step 1 ---------------------------------------------
node_prepare() {
	echo "step=node"
	# The GPUs' device files, as NVIDIA's driver makes them (fakecuda never
	# opens them; slurmd checks gres.conf's File= is a character device).
	mknod -m 0666 /dev/nvidia0 c 195 0
	mknod -m 0666 /dev/nvidia1 c 195 1
	# The driver: fakecuda's package.
	dpkg --install "$FAKEDEB" >/tmp/dpkg-fake.out 2>&1 || { cat /tmp/dpkg-fake.out; fail "dpkg --install gpuslice-fakecuda"; }
	if [ -n "${NVIDIA_SMI_DIR:-}" ]; then
		ln -s "$NVIDIA_SMI_DIR/nvidia-smi" /usr/bin/nvidia-smi
	fi
	# A cluster of one node, already running, with nothing of gpuslice's.
	SLURM_CONF_FILE=/etc/slurm/slurm.conf
	PLUGIN_DIR=/usr/lib/x86_64-linux-gnu/slurm-wlm
	if [ -n "${SLURM_TREE:-}" ]; then
		# Debian's Slurm goes, with the gpu/nvml plugin the root's build
		# unpacked outside dpkg (scripts/trixie-root.sh).
		dpkg --purge slurmctld slurmd slurm-client slurm-wlm-basic-plugins >/tmp/dpkg-slurm.out 2>&1 ||
			{ cat /tmp/dpkg-slurm.out; fail "dpkg --purge Debian's Slurm"; }
		rm -rf /usr/lib/x86_64-linux-gnu/slurm-wlm
		cp -a "$SLURM_TREE"/. /usr/local/
		# Its compiled-in paths (slurm.conf, PluginDir, slurmstepd) are
		# under the prefix it was built for: that prefix is /usr/local.
		mkdir -p "$(dirname "$SLURM_PREFIX")" /usr/local/etc
		ln -s /usr/local "$SLURM_PREFIX"
		ldconfig
		SLURM_CONF_FILE=/usr/local/etc/slurm.conf
		PLUGIN_DIR=/usr/local/lib/slurm
		echo "slurm=$(slurmd -V)"
	fi
	mkdir -p /var/spool/gs-ctld /var/spool/gs-slurmd /var/log/slurm /etc/slurm
	cat >"$SLURM_CONF_FILE" <<-EOF
	ClusterName=gspath
	SlurmctldHost=$NODE(127.0.0.1)
	SlurmctldPort=$CTLD_PORT
	SlurmdPort=$SLURMD_PORT
	AuthType=auth/munge
	CredType=cred/munge
	SlurmUser=root
	StateSaveLocation=/var/spool/gs-ctld
	SlurmdSpoolDir=/var/spool/gs-slurmd
	SlurmctldLogFile=/var/log/slurm/slurmctld.log
	SlurmdLogFile=/var/log/slurm/slurmd.log
	ProctrackType=proctrack/linuxproc
	TaskPlugin=task/none
	JobAcctGatherType=jobacct_gather/none
	AccountingStorageType=accounting_storage/none
	SelectType=select/cons_tres
	MpiDefault=none
	ReturnToService=2
	NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
	PartitionName=test Nodes=$NODE Default=YES MaxTime=10 State=UP
	EOF
	# Without cgroups, slurmd still loads a cgroup plugin unless
	# cgroup.conf says CgroupPlugin=disabled, which 24.05 and later know.
	# 22.05's and 23.11's slurmd want a cgroup filesystem at /sys/fs/cgroup,
	# and the root has none of its own (its /sys is this machine's, without
	# the mounts below it): an empty tmpfs there, private to this run's
	# mount namespace, and cgroup/v1, whose controllers proctrack/linuxproc
	# and task/none never ask for.
	case $(slurmd -V) in
	*" 22."*|*" 23."*) mount -t tmpfs -o mode=0755,nosuid,nodev,noexec cgroup-none /sys/fs/cgroup
		echo "CgroupPlugin=cgroup/v1" >"$(dirname "$SLURM_CONF_FILE")/cgroup.conf" ;;
	*) echo "CgroupPlugin=disabled" >"$(dirname "$SLURM_CONF_FILE")/cgroup.conf" ;;
	esac
	dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
	chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
	svc_start munge
	svc_start slurmctld
	svc_start slurmd
	wait_idle
}
