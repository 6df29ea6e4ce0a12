package slurm

// slurm.conf, gres.conf, cgroup.conf, plugstack.conf, job_submit.lua and
// the Prolog/Epilog wrappers of the test cluster. What depends on the Slurm
// release is in this file only (slurmRelease: slurm2205, slurm2411); the
// node lines come from each node's `gpuslice slurm-config`, as an admin
// would produce them.

import (
	"fmt"
	"os"
	"strings"
)

// slurmRelease is what the suite does differently on one Slurm release.
type slurmRelease struct {
	name string // major.minor, as `slurmctld -V` prints it
	// inRoot: the suite runs in the Debian 13 root (internal/debroot).
	inRoot bool
	// plugin is the SPANK plugin built for this release, under the build
	// directory.
	plugin string
	// otherPlugin is the plugin built for another release, under the
	// build directory, that this release's srun must refuse
	// (TestOtherReleasePluginRefused); empty: not checked here, and
	// noOtherPlugin says why.
	otherPlugin   string
	noOtherPlugin string
	// conf are the slurm.conf settings this release needs here.
	conf string
	// noCgroupConf is cgroup.conf's content when the cluster tracks jobs
	// without cgroups (linuxproc); empty: no cgroup.conf.
	noCgroupConf string
	// gres is how a gres starts in a job's TRES strings (TresPerNode):
	// "gres:" up to 22.05, "gres/" from 23.02 on.
	gres string
	// net is what the run owns on the machine (cluster_test.go).
	net hostNet
	// noAccounting, when set, says why this release runs without slurmdbd.
	noAccounting string
	// skip maps a test that cannot pass on this release to why.
	skip map[string]string
}

// slurm2205 is Debian 12's Slurm 22.05 on this machine, with
// SlurmdParameters=config_overrides so each node may declare more CPUs than
// the machine has. How jobs are tracked (cgroup v2 or linuxproc) is
// tracking's (cgroup_test.go).
var slurm2205 = slurmRelease{
	name:   "22.05",
	plugin: "spank/gpuslice.so",
	gres:   "gres:",
	conf: `SlurmdParameters=config_overrides
`,
	net: net2205,
	noOtherPlugin: "the plugin built for 24.11 in the Debian 13 root needs glibc 2.38 and Debian 12 has 2.36, " +
		"so 22.05's srun would fail to load it on its C library before any check of the Slurm release",
}

// slurm2411 is Debian 13's Slurm 24.11 in the Debian 13 root (make
// trixie-root), with the plugin built there (make spank-24.11). As on
// 22.05, and: without cgroups, 24.11's slurmd and slurmstepd load a cgroup
// plugin even with proctrack/linuxproc and task/none unless cgroup.conf
// says CgroupPlugin=disabled (a value 22.05 does not know). The plugin
// built for 22.05 on this machine (make spank), which the root sees under
// the bind-mounted build directory, is there to be refused.
var slurm2411 = slurmRelease{
	name:        "24.11",
	inRoot:      true,
	plugin:      "spank-24.11/gpuslice.so",
	otherPlugin: slurm2205.plugin,
	gres:        "gres/",
	conf: `SlurmdParameters=config_overrides
`,
	noCgroupConf: "CgroupPlugin=disabled\n",
	net:          net2411,
}

// releases are the Slurm releases the suite runs on, by
// GPUSLICE_SLURM_RELEASE (default: 22.05, the machine's own).
var releases = map[string]slurmRelease{"22.05": slurm2205, "24.11": slurm2411}

// slurm is the release of this run (TestMain).
var slurm = slurm2205

// noAccounting are the accounting lines when ClusterOptions.Accounting is
// empty: no slurmdbd.
const noAccounting = `JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
`

// prologRetryArg is the Prolog/Epilog --retry-timeout in the test cluster.
const prologRetryArg = "10s"

func (c *cluster) writeSlurmConfig() error {
	ctldPort, err := freePort()
	if err != nil {
		return err
	}
	slurmdPort, err := freePort()
	if err != nil {
		return err
	}
	for ctldPort == slurmdPort {
		if slurmdPort, err = freePort(); err != nil {
			return err
		}
	}
	// slurmd runs the Prolog/Epilog without its own environment: the
	// wrappers pass where gpusliced listens (the same path on every node).
	// They also keep the environment slurmd gave them, what the program
	// wrote and how long it ran (ns), for the tests. Without slurmdbd the
	// Epilog runs as an admin would install it: it finds out itself that
	// there is no accounting.
	wrapper := func(bin, name string) string {
		return fmt.Sprintf(`#!/bin/sh
out=%[1]s/%[2]s-$SLURM_JOB_ID-$(hostname)
env > "$out.env"
start=$(date +%%s%%N)
%[3]s --admin-socket %[4]s --retry-timeout %[5]s "$@" 2>"$out.err"
rc=$?
end=$(date +%%s%%N)
cat "$out.err" >&2
{ cat "$out.err"; echo "ran_ns=$((end - start)) rc=$rc"; } >>"$out.log"
exit $rc
`, c.path("log"), name, bin, c.admSock, prologRetryArg)
	}
	if err := writeFile(c.path("prolog.sh"), wrapper(c.bin("prolog"), "prolog"), 0o755); err != nil {
		return err
	}
	if err := writeFile(c.path("epilog.sh"), wrapper(c.bin("epilog"), "epilog"), 0o755); err != nil {
		return err
	}
	if err := c.writePlugstack(c.opts.PlugstackArgs); err != nil {
		return err
	}
	lua, err := repoFile("etc/slurm/job_submit.lua")
	if err != nil {
		return err
	}
	script, err := os.ReadFile(lua)
	if err != nil {
		return fmt.Errorf("the shipped job_submit.lua: %w", err)
	}
	if err := writeFile(c.path("job_submit.lua"), string(script), 0o644); err != nil {
		return err
	}

	var nodeLines, gres []string
	for _, n := range c.nodes {
		line, err := n.slurmConfig("node")
		if err != nil {
			return err
		}
		nodeLines = append(nodeLines, fmt.Sprintf("%s NodeAddr=%s NodeHostname=%s CPUs=%d State=UNKNOWN", line, n.Addr, n.Name, n.CPUs))
		g, err := n.slurmConfig("gres")
		if err != nil {
			return err
		}
		gres = append(gres, g)
	}
	accounting := noAccounting
	if len(c.opts.Accounting) > 0 {
		accounting = strings.Join(c.opts.Accounting, "\n") + "\n"
	}
	c.conf = c.path("slurm.conf")
	conf := fmt.Sprintf(`# gpuslice end-to-end test cluster
ClusterName=gpuslicetest
SlurmctldHost=%[2]s(%[3]s)
SlurmctldPort=%[4]d
SlurmdPort=%[5]d
AuthType=auth/munge
AuthInfo=socket=%[1]s/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool/%%n
SlurmctldPidFile=%[1]s/run/slurmctld.pid
SlurmdPidFile=%[1]s/run/slurmd-%%n.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd-%%n.log
SlurmctldDebug=info
SlurmdDebug=debug
%[6]s%[10]sSelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=2
MessageTimeout=10
SchedulerParameters=defer_batch,sched_min_interval=200000
PlugStackConfig=%[1]s/plugstack.conf
JobSubmitPlugins=lua
Prolog=%[1]s/prolog.sh
Epilog=%[1]s/epilog.sh
PrologFlags=Alloc
GresTypes=gpu,shard
%[7]s
%[8]s
%[9]s
`, c.dir, c.ctldHost, bridgeAddr, ctldPort, slurmdPort, slurm.conf+tracking.conf,
		strings.Join(nodeLines, "\n"), strings.Join(c.opts.Partitions, "\n"), c.opts.ExtraConf, accounting)
	for _, n := range c.nodes {
		if err := os.MkdirAll(c.path("spool", n.Name), 0o755); err != nil {
			return err
		}
	}
	if err := writeFile(c.conf, conf, 0o644); err != nil {
		return err
	}
	if cg := c.cgroupConf(); cg != "" {
		if err := writeFile(c.path("cgroup.conf"), cg, 0o644); err != nil {
			return err
		}
	}
	return writeFile(c.path("gres.conf"), strings.Join(gres, "\n")+"\n", 0o644)
}

// writePlugstack writes plugstack.conf with the plugin's arguments.
// srun, sbatch, salloc and slurmstepd read it each time they start.
func (c *cluster) writePlugstack(args string) error {
	return c.writePlugstackOf(c.bin("plugin"), args)
}

// writePlugstackOf writes plugstack.conf naming plugin, a SPANK plugin
// file, with the arguments.
func (c *cluster) writePlugstackOf(plugin, args string) error {
	line := fmt.Sprintf("required %s lib=%s socket=%s %s\n", plugin, c.bin("interceptor"), c.ipcSock, args)
	return writeFile(c.path("plugstack.conf"), line, 0o644)
}
