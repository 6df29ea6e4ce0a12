package slurm

// slurm.conf, gres.conf, plugstack.conf, job_submit.lua and the
// Prolog/Epilog wrappers of the test cluster. What depends on the Slurm
// version is in this file only (slurm22Conf); the node lines come from each
// node's `gpuslice slurm-config`, as an admin would produce them.

import (
	"fmt"
	"os"
	"strings"
)

// slurm22Conf holds the settings that Debian 12's Slurm 22.05 needs here
// (a later Slurm may need others): process tracking without cgroups (the
// nodes share the machine's cgroup tree), no accounting daemon, and
// SlurmdParameters=config_overrides so each node may declare more CPUs than
// the machine has.
const slurm22Conf = `ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
`

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
	// They also keep the environment slurmd gave them, for the tests.
	wrapper := func(bin, name string) string {
		return fmt.Sprintf("#!/bin/sh\nenv > %s/%s-$SLURM_JOB_ID-$(hostname).env\nexec %s --admin-socket %s --retry-timeout %s \"$@\"\n",
			c.path("log"), name, bin, c.admSock, prologRetryArg)
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
`, c.dir, c.ctldHost, bridgeAddr, ctldPort, slurmdPort, slurm22Conf,
		strings.Join(nodeLines, "\n"), strings.Join(c.opts.Partitions, "\n"), c.opts.ExtraConf, accounting)
	for _, n := range c.nodes {
		if err := os.MkdirAll(c.path("spool", n.Name), 0o755); err != nil {
			return err
		}
	}
	if err := writeFile(c.conf, conf, 0o644); err != nil {
		return err
	}
	return writeFile(c.path("gres.conf"), strings.Join(gres, "\n")+"\n", 0o644)
}

// writePlugstack writes plugstack.conf with the plugin's arguments.
// srun, sbatch, salloc and slurmstepd read it each time they start.
func (c *cluster) writePlugstack(args string) error {
	line := fmt.Sprintf("required %s lib=%s socket=%s %s\n", c.bin("plugin"), c.bin("interceptor"), c.ipcSock, args)
	return writeFile(c.path("plugstack.conf"), line, 0o644)
}
