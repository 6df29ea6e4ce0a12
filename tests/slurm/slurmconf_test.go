package slurm

// slurm.conf, gres.conf, cgroup.conf, plugstack.conf, job_submit.lua and
// the Prolog/Epilog wrappers of the test cluster. What depends on the Slurm
// release is in this file only (slurmRelease: slurm2205, slurm2411); the
// node lines come from each node's `gpuslice slurm-config`, as an admin
// would produce them.

import (
	"fmt"
	"os"
	"path/filepath"
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
	// (TestOtherReleasePluginRefused).
	otherPlugin string
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
	// tree is the release built from SchedMD's source (make slurm-src),
	// under the build directory: its programs come first in PATH, its
	// plugins are PluginDir, its slurmstepd is slurmd -d. Empty: the
	// distribution's Slurm (the machine's or the Debian 13 root's).
	tree string
	// debian is the Debian release the suite runs on (/etc/debian_version).
	debian string
	// multipleSlurmd: built with MULTIPLE_SLURMD (Debian's builds), which
	// names the steps' scope <node>_slurmstepd.scope.
	multipleSlurmd bool
	// sluidCgroups: a job's cgroup v2 directory is named by its SLUID
	// (26.05 without CgroupJobIdPaths=yes), not job_<id>.
	sluidCgroups bool
	// jobFailureMode: the plugin exports slurm_spank_init_failure_mode
	// (25.05 on), so a failed init in slurmstepd fails the job and leaves
	// the node in service.
	jobFailureMode bool
	// core: only coreTests run on this release (the rest skip).
	core bool
	// gresGPUApart: Slurm never gives a GPU whose shards a job uses to a
	// gres/gpu job (fixed in 23.11.5), so job_submit.lua lets jobs of
	// whole GPUs share their node. TestGresGPUApartFromShards measures it.
	gresGPUApart bool
	// pyxis is pyxis built against this release's headers (make pyxis,
	// make pyxis-releases), under the build directory; empty: pyxis jobs
	// are not run here, and noPyxis says why.
	pyxis   string
	noPyxis string
}

// coreTests are what runs on every release, the core subset on the
// releases that do not run the full suite (issue 52 item 5): --gpu-mem
// through srun, sbatch and salloc with the quota enforced and the memory
// released at the job's end, placement by GPU memory through
// job_submit.lua, default= with whole-GPU jobs, a refusal on the node
// failing the job and never draining it, a failed plugin init failing the
// job only, cgroup v2 with ConstrainDevices=yes, the lines a step's output
// ends with (srun and sbatch), whether Slurm keeps a GPU held as gres/gpu
// away from shards (and job_submit.lua's rule for whole GPUs with it), no
// Slurm command run by a Prolog or an Epilog across a queue of every kind
// of job.
var coreTests = map[string]bool{
	"TestSlurmRelease":                  true,
	"TestSrunQuota":                     true,
	"TestSbatchSharedQuota":             true,
	"TestSallocQuota":                   true,
	"TestQueuePacksByGPUMemory":         true,
	"TestDefaultQuota":                  true,
	"TestNodeRefusalFailsJobNotNode":    true,
	"TestInitFailureFailsJobNotNode":    true,
	"TestJobCgroupLayout":               true,
	"TestConstrainDevices":              true,
	"TestStepEndLinesSrun":              true,
	"TestStepEndLinesSbatch":            true,
	"TestPrologEpilogRunNoSlurmCommand": true,
	"TestGresGPUApartFromShards":        true,
}

// onceTests are the long cases whose subject is gpuslice's own (a
// 256-node job's records) or one Slurm behaviour read in its source
// (usage added at a job's end), run on one release each, so make test's
// lanes stay short: each takes about two minutes, sleeping on Slurm's
// passes and gpusliced's turns. GPUSLICE_SLURM_EVERY=1 runs them on every
// release the suite runs on.
var onceTests = map[string]string{
	"TestAccounting256Nodes": "24.11",
	"TestUsageAtJobEnd":      "26.05",
}

// slurm2205 is Debian 12's Slurm 22.05 on this machine, with
// SlurmdParameters=config_overrides so each node may declare more CPUs than
// the machine has. How jobs are tracked (cgroup v2 or linuxproc) is
// tracking's (cgroup_test.go).
var slurm2205 = slurmRelease{
	name:           "22.05",
	debian:         "12",
	multipleSlurmd: true,
	plugin:         "spank/gpuslice.so",
	pyxis:          "containers/pyxis",
	gres:           "gres:",
	conf: `SlurmdParameters=config_overrides
`,
	net: net2205,
	// built against 24.11's headers with this machine's C library (make
	// spank-24.11), so 22.05's srun loads it and refuses its release
	otherPlugin: "spank-24.11/gpuslice.so",
}

// slurm2411 is Debian 13's Slurm 24.11 in the Debian 13 root (make
// trixie-root), with the plugin built against its headers (make
// spank-24.11). As on
// 22.05, and: without cgroups, 24.11's slurmd and slurmstepd load a cgroup
// plugin even with proctrack/linuxproc and task/none unless cgroup.conf
// says CgroupPlugin=disabled (a value 22.05 does not know). The plugin
// built for 22.05 on this machine (make spank), which the root sees under
// the bind-mounted build directory, is there to be refused.
var slurm2411 = slurmRelease{
	name:           "24.11",
	debian:         "13",
	multipleSlurmd: true,
	inRoot:         true,
	plugin:         "spank-24.11/gpuslice.so",
	noPyxis:        "enroot, which pyxis runs, and its squashfuse and fuse-overlayfs are this machine's, not the Debian 13 root's",
	otherPlugin:    slurm2205.plugin,
	gres:           "gres/",
	conf: `SlurmdParameters=config_overrides
`,
	noCgroupConf: "CgroupPlugin=disabled\n",
	net:          net2411,
	gresGPUApart: true,
}

// schedmd is one of SchedMD's releases built from source on this machine
// (make slurm-src-NAME, make spank-NAME), with a network of its own (tag
// gs<major><minor>, subnet 10.<subnet>.0.0/24) so that every release may
// run at once.
func schedmd(name string, subnet int, core bool) slurmRelease {
	tag := "gs" + strings.ReplaceAll(name, ".", "")
	r := slurmRelease{
		name:        name,
		debian:      "12",
		tree:        "slurm/" + name,
		plugin:      "spank/" + name + "/gpuslice.so",
		pyxis:       "containers/pyxis-" + name,
		otherPlugin: slurm2205.plugin,
		gres:        "gres/",
		conf: `SlurmdParameters=config_overrides
`,
		noCgroupConf:   "CgroupPlugin=disabled\n",
		net:            hostNet{tag: tag, subnet: fmt.Sprintf("10.%d.0", subnet), lock: "/run/gpuslice-" + tag + "-suite.lock", tmp: "gpuslice-slurm" + strings.ReplaceAll(name, ".", "") + "-"},
		sluidCgroups:   name >= "26.05",
		jobFailureMode: name >= "25.05",
		core:           core,
		// every release pinned in mk/sources.txt is 23.11.5 or later
		gresGPUApart: true,
	}
	return r
}

// releases are the Slurm releases the suite runs on, by
// GPUSLICE_SLURM_RELEASE (default: 22.05, the machine's own): Debian's
// 22.05 and 24.11, and SchedMD's releases built from source, the full
// suite on 26.05 and the core subset (coreTests) on the others.
var releases = map[string]slurmRelease{
	"22.05": slurm2205,
	"24.11": slurm2411,
	"23.11": schedmd("23.11", 79, true),
	"24.05": schedmd("24.05", 80, true),
	"25.05": schedmd("25.05", 81, true),
	"25.11": schedmd("25.11", 82, true),
	"26.05": schedmd("26.05", 83, false),
}

// treeConf is what slurm.conf needs for a release built from source: its
// plugins.
func (r slurmRelease) treeConf(build string) string {
	if r.tree == "" {
		return ""
	}
	return "PluginDir=" + filepath.Join(build, r.tree, "lib", "slurm") + "\n"
}

// slurmdArgs are slurmd's arguments besides -D -f: its slurmstepd for a
// release built from source.
func (r slurmRelease) slurmdArgs(build string) []string {
	if r.tree == "" {
		return nil
	}
	return []string{"-d", filepath.Join(build, r.tree, "sbin", "slurmstepd")}
}

// acctArgs are gpusliced's arguments for a release built from source: its
// sacct and sacctmgr, with which gpusliced records the jobs' figures (the
// machine's /usr/bin ones are 22.05's, which a newer slurmdbd does not
// answer).
func (r slurmRelease) acctArgs(build string) []string {
	if r.tree == "" {
		return nil
	}
	bin := filepath.Join(build, r.tree, "bin")
	return []string{"--sacct", filepath.Join(bin, "sacct"), "--sacctmgr", filepath.Join(bin, "sacctmgr")}
}

// treePath is the PATH prefix of a release built from source ("" for the
// distribution's).
func (r slurmRelease) treePath(build string) string {
	if r.tree == "" {
		return ""
	}
	return filepath.Join(build, r.tree, "bin") + ":" + filepath.Join(build, r.tree, "sbin") + ":"
}

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
		if e := c.opts.AccountingStorageEnforce; e != "" {
			accounting += "AccountingStorageEnforce=" + e + "\n"
		}
	}
	c.conf = c.path("slurm.conf")
	prologFlags := "Alloc"
	if c.opts.Ssh {
		prologFlags = "Alloc,Contain" // pam_slurm_adopt's extern step
	}
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
MessageTimeout=30
SchedulerParameters=defer_batch,sched_min_interval=200000
PlugStackConfig=%[1]s/plugstack.conf
JobSubmitPlugins=lua
Prolog=%[1]s/prolog.sh
Epilog=%[1]s/epilog.sh
PrologFlags=%[11]s
GresTypes=gpu,shard
%[7]s
%[8]s
%[9]s
`, c.dir, c.ctldHost, bridgeAddr, ctldPort, slurmdPort, slurm.conf+slurm.treeConf(c.build)+tracking.conf,
		strings.Join(nodeLines, "\n"), strings.Join(c.opts.Partitions, "\n"), c.opts.ExtraConf, accounting, prologFlags)
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
