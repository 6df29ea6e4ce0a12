#!/bin/sh
# The admin's install steps of docs/install.md on Debian 13, run inside the
# Debian 13 root (through an overlay, so the root stays as built): install
# the packages with dpkg (which enables the plugin built for Slurm 24.11),
# add the Prolog/Epilog to slurm.conf, start the daemons as systemd would
# (fakecuda's NVML, no GPU here), run a job with --gpu-mem, then purge. Prints key=value lines the test
# reads; exits non-zero at the first step that fails.
#
# Environment: DEB, FAKEDEB (paths inside the root), NODE (NodeName),
# CTLD_PORT, SLURMD_PORT.
set -eu

step() { echo "step=$1"; }
fail() { echo "fail=$*"; exit 1; }
export DEBIAN_FRONTEND=noninteractive

# The daemons run in the foreground of this script and are stopped by their
# own pids when it ends, however it ends (the root shares this machine's
# processes: never by name).
pids=
stop() {
	[ -z "$pids" ] || kill $pids 2>/dev/null || true
	for p in $pids; do
		i=0
		while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
		kill -9 "$p" 2>/dev/null || true
	done
	pids=
}
trap stop EXIT

step install
dpkg --install "$FAKEDEB" "$DEB" >/tmp/dpkg.out 2>&1 || { cat /tmp/dpkg.out; fail "dpkg --install"; }
cat /tmp/dpkg.out
echo "installed=$(dpkg-query -W -f '${Version}' gpuslice)"
echo "plugin=$(readlink /usr/lib/x86_64-linux-gnu/slurm-wlm/gpuslice.so)"

step slurm-conf
# A one-node cluster, plus the lines install.md asks for (the fragment).
mkdir -p /var/spool/gs-ctld /var/spool/gs-slurmd /var/log/slurm
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=gspkg13
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
grep -E '^(Prolog|Epilog|PrologFlags)=' /usr/share/doc/gpuslice/slurm.conf.fragment >>/etc/slurm/slurm.conf
echo "CgroupPlugin=disabled" >/etc/slurm/cgroup.conf
grep -q 'plugstack.conf.d' /etc/slurm/plugstack.conf || fail "Debian 13's plugstack.conf does not include plugstack.conf.d"

step daemons
# munge: a fresh key, as the munge package's postinst leaves for the admin.
dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
setpriv --reuid=munge --regid=munge --init-groups munged --foreground >/var/log/munged.out 2>&1 &
pids="$pids $!"
# gpusliced as its unit and install.md's fakecuda drop-in would start it:
# RuntimeDirectory and StateDirectory made first.
mkdir -p /run/gpuslice /var/lib/gpuslice && chmod 0700 /var/lib/gpuslice
FAKECUDA_DEVICES=80GiB /usr/sbin/gpusliced --config /etc/gpuslice/gpusliced.yaml \
	--nvml-library /usr/lib/gpuslice/fakecuda/libnvidia-ml.so.1 >/var/log/gpusliced.log 2>&1 &
pids="$pids $!"
i=0
until [ -S /run/munge/munge.socket.2 ]; do
	i=$((i + 1)); [ $i -lt 75 ] || fail "munged did not start"; sleep 0.2
done
slurmctld -D -i >/var/log/slurm/slurmctld.out 2>&1 &
pids="$pids $!"
slurmd -D >/var/log/slurm/slurmd.out 2>&1 &
pids="$pids $!"
i=0
until [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; do
	i=$((i + 1))
	[ $i -lt 150 ] || { tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/gpusliced.log; fail "node not idle"; }
	sleep 0.2
done
gpuslice gpus || fail "gpuslice gpus"

step verify
# install.md's checks: the plugin is loaded, and a job is held to its quota.
srun --help | grep -q -- '--gpu-mem' && echo "srun_help=gpu-mem" || fail "srun --help lacks --gpu-mem"
id gsltest1 >/dev/null 2>&1 || useradd --system --no-create-home --user-group gsltest1
cd /tmp
# FAKECUDA_CTX_BYTES=0: the check counts allocations, not context memory.
LD_LIBRARY_PATH=/usr/lib/gpuslice/fakecuda FAKECUDA_DEVICES=80GiB FAKECUDA_CTX_BYTES=0 \
	setpriv --reuid=gsltest1 --regid=gsltest1 --init-groups \
	srun --gpu-mem=64M /usr/libexec/gpuslice/examples/target_app --step 16M --count 5 || fail "srun target_app"
srun --gpu-mem=8X true 2>/tmp/bad.err && fail "srun --gpu-mem=8X was accepted"
echo "bad_gpu_mem=$(grep -o "invalid --gpu-mem '8X'" /tmp/bad.err)"

step purge
scancel --full --quiet --partition=test || true
stop
dpkg --purge gpuslice gpuslice-fakecuda >/tmp/dpkg.out 2>&1 || { cat /tmp/dpkg.out; fail "dpkg --purge"; }
[ ! -e /usr/lib/x86_64-linux-gnu/slurm-wlm/gpuslice.so ] || fail "plugin left after purge"
[ ! -e /etc/slurm/plugstack.conf.d/gpuslice.conf ] || fail "plugstack snippet left after purge"
echo "purged=yes"
