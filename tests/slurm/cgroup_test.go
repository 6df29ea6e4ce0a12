package slurm

// How the test cluster tracks jobs. By default as GPU sites run Slurm:
// cgroup v2, proctrack/cgroup, task/cgroup with ConstrainDevices=yes. Each
// node gets a cgroup v2 subtree of its own (<v2 root>/<tag>-<node>) and a
// cgroup namespace rooted there, with cgroup2 mounted at /sys/fs/cgroup in
// its mount namespace: its slurmd sees a cgroup v2 machine of its own, as
// on a real host, and the two nodes on this machine do not collide.
// GPUSLICE_SLURM_TRACKING=linuxproc runs the cluster without cgroups
// (proctrack/linuxproc, task/none), for sites that have none.
//
// Where the machine mounts cgroup v1 hierarchies beside cgroup v2 (a
// "hybrid" host, as this one), Slurm's cgroup/v2 plugin refuses to start
// on seeing the v1 lines in /proc/self/cgroup; and the nodes have no pid
// namespace, so pid 1, where Slurm 24.11 looks for the top of the node's
// cgroup tree, is the machine's init. The suite preloads libv2view.so into
// slurmd (tests/slurm/v2view), which shows slurmd and slurmstepd the
// cgroup v2 line alone of their cgroup file, and the node's holder as its
// init. Nothing else is changed: the cgroups, process tracking and the
// eBPF device filter are the kernel's. Controllers bound to v1 hierarchies are not available to
// cgroup v2, so ConstrainRAMSpace is on only where the node's subtree has
// the memory controller (cgroupConf says why not otherwise).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// trackingMode is how slurmd tracks and confines jobs.
type trackingMode struct {
	name   string
	cgroup bool   // cgroup v2 subtrees per node
	conf   string // slurm.conf lines
}

var (
	trackCgroupV2 = trackingMode{name: "cgroup", cgroup: true, conf: `ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
`}
	trackLinuxproc = trackingMode{name: "linuxproc", conf: `ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
`}
)

// tracking is this run's mode (TestMain, from GPUSLICE_SLURM_TRACKING).
var tracking = trackCgroupV2

func trackingFromEnv() (trackingMode, error) {
	switch v := os.Getenv("GPUSLICE_SLURM_TRACKING"); v {
	case "", trackCgroupV2.name:
		return trackCgroupV2, nil
	case trackLinuxproc.name:
		return trackLinuxproc, nil
	default:
		return trackingMode{}, fmt.Errorf("GPUSLICE_SLURM_TRACKING=%s: cgroup (the default) or linuxproc", v)
	}
}

// cgroupV2Root finds the cgroup v2 hierarchy as this process sees it:
// /sys/fs/cgroup on a cgroup v2 host, /sys/fs/cgroup/unified on a hybrid
// one. Inside the Debian 13 root /sys comes without its submounts, so it
// mounts one at /run/<tag>-cgroup2 (the root's mounts are private to its
// run).
func cgroupV2Root() (string, error) {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if isCgroup2(p) {
			return p, nil
		}
	}
	dir := filepath.Join("/run", netTag+"-cgroup2")
	if isCgroup2(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		return "", fmt.Errorf("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified, and mount cgroup2 on %s: %w", dir, err)
	}
	return dir, nil
}

func isCgroup2(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// Leaves of a node's subtree: the process holding its namespaces, and
// every daemon and command started in the node (slurmd, gpusliced, what a
// logged-in user runs). Slurm makes system.slice/slurmstepd.scope for its
// steps (IgnoreSystemd=yes: as systemd would, the suite makes
// system.slice).
const (
	nodeHolderCgroup = "init"
	nodeDaemonCgroup = "daemons"
)

// makeNodeCgroup creates node n's subtree; "" when the cluster runs
// without cgroups.
func (n *node) makeNodeCgroup() error {
	if !tracking.cgroup {
		return nil
	}
	root, err := cgroupV2Root()
	if err != nil {
		return err
	}
	n.cg = filepath.Join(root, netnsPrefix+n.Name)
	for _, d := range []string{"", nodeHolderCgroup, nodeDaemonCgroup, "system.slice"} {
		if err := os.Mkdir(filepath.Join(n.cg, d), 0o755); err != nil {
			return fmt.Errorf("node cgroup: %w", err)
		}
	}
	return nil
}

// cgroupConf is cgroup.conf for this run.
func (c *cluster) cgroupConf() string {
	if !tracking.cgroup {
		return slurm.noCgroupConf
	}
	ram := "yes"
	if len(c.nodes) > 0 && !c.nodes[0].hasController("memory") {
		ram = "no"
		fmt.Fprintln(os.Stderr, "slurm suite: "+memoryNote)
	}
	return fmt.Sprintf(`CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainDevices=yes
ConstrainRAMSpace=%s
`, ram)
}

// memoryNote says why ConstrainRAMSpace is off on this machine.
const memoryNote = "this machine's memory controller is bound to a cgroup v1 hierarchy, so cgroup v2 cannot have it and slurmd runs with ConstrainRAMSpace=no"

// hasController says whether node n's subtree may enable controller.
func (n *node) hasController(name string) bool {
	b, err := os.ReadFile(filepath.Join(n.cg, "cgroup.controllers"))
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == name {
			return true
		}
	}
	return false
}

// slurmdEnv is the environment of node n's slurmd (and so of the
// slurmstepds it starts): with cgroups, libv2view.so preloaded where the
// host is hybrid, and the node's init (its holder) for Slurm 24.11's look
// at pid 1's cgroup (tests/slurm/v2view).
func (n *node) slurmdEnv() []string {
	env := append(os.Environ(), "SLURM_CONF="+n.c.conf)
	if tracking.cgroup {
		env = append(env, "LD_PRELOAD="+filepath.Join(n.c.build, "tests", "slurm", "libv2view.so"),
			"V2VIEW_INIT_PID="+strconv.Itoa(n.holder))
	}
	return env
}

// holderCommand wraps the script of the process holding node n's
// namespaces: it moves into the node's subtree, takes a cgroup namespace
// rooted there, mounts it on /sys/fs/cgroup and moves to its own leaf.
func (n *node) holderCommand(prop, script string) *exec.Cmd {
	ns := "--net=/run/netns/" + netnsPrefix + n.Name
	if n.cg == "" {
		return exec.Command("nsenter", ns, "unshare", "--uts", "--mount", "--propagation", prop, "--", "sh", "-c", script)
	}
	inner := fmt.Sprintf("mount -t cgroup2 cgroup2 /sys/fs/cgroup && echo $$ > /sys/fs/cgroup/%s/cgroup.procs && %s",
		nodeHolderCgroup, script)
	return exec.Command("nsenter", ns, "sh", "-c",
		`echo $$ > "$1/cgroup.procs" && exec unshare --uts --mount --cgroup --propagation "$2" -- sh -c "$3"`,
		"sh", n.cg, prop, inner)
}

// nsenter builds a command entering node n with nsenter's extra arguments
// (-S/-G) before name. With cgroups it first moves into the node's
// daemons leaf: a process that enters a cgroup namespace keeps its
// cgroup, which must lie inside the namespace for the node's view of it
// (/proc/self/cgroup, /sys/fs/cgroup) to hold.
func (n *node) nsenter(extra []string, name string, args ...string) *exec.Cmd {
	a := append(append(append(n.enterNode(), extra...), "--", name), args...)
	if n.cg == "" {
		return exec.Command("nsenter", a...)
	}
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec nsenter "$@"`,
		filepath.Join(n.cg, nodeDaemonCgroup, "cgroup.procs")}, a...)...)
}

// removeNodeCgroups kills what is left in the run's node subtrees and
// removes them (deepest first).
func removeNodeCgroups() {
	root := ""
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", filepath.Join("/run", netTag+"-cgroup2")} {
		if isCgroup2(p) {
			root = p
			break
		}
	}
	if root == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(root, netnsPrefix+"*"))
	for _, d := range dirs {
		if err := removeCgroupTree(d); err != nil {
			fmt.Fprintf(os.Stderr, "slurm suite: %v\n", err)
		}
	}
}

// removeCgroupTree kills every process in the subtree at dir (cgroup.kill)
// and removes its directories.
func removeCgroupTree(dir string) error {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	var subdirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			subdirs = append(subdirs, p)
		}
		return nil
	})
	return waitFor(10*time.Second, func() error {
		var errs []error
		for i := len(subdirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(subdirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", subdirs[i], err))
			}
		}
		return errors.Join(errs...)
	})
}

// cgroupOf is pid's cgroup v2 path as the node sees it ("0::" line of
// /proc/<pid>/cgroup read from inside the node).
func (n *node) cgroupOf(pid int) (string, error) {
	out, err := n.command("cat", fmt.Sprintf("/proc/%d/cgroup", pid)).Output()
	if err != nil {
		return "", fmt.Errorf("cgroup of %d on %s: %w", pid, n.Name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 line for %d on %s", pid, n.Name)
}

// jobCgroupName is the name of job id's cgroup v2 directory under
// slurmCgroupRoot: job_<id>, or on 26.05 (slurmRelease.sluidCgroups) the
// job's SLUID, as slurmd gave it to the job's Prolog (SLURM_JOB_SLUID;
// scontrol does not show it).
func (c *cluster) jobCgroupName(t *testing.T, id string) string {
	t.Helper()
	name, err := c.jobCgroupNameNow(t, id)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// jobCgroupNameNow is jobCgroupName, or an error while the job's Prolog
// has not yet written its environment: a job shows as running in squeue
// before its Prolog is done (on 26.05, TestDriverMemoryLimit read the
// file too soon, failed, and its srun, killed with the test, left the
// job's allocation running on the node for the rest of the suite).
func (c *cluster) jobCgroupNameNow(t *testing.T, id string) (string, error) {
	t.Helper()
	if !slurm.sluidCgroups {
		return "job_" + id, nil
	}
	b, err := os.ReadFile(c.prologEnvPath(id, c.jobNodes(t, id)[0]))
	if err != nil {
		return "", fmt.Errorf("job %s's Prolog has not written its environment yet: %w", id, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SLURM_JOB_SLUID="); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("job %s: no SLURM_JOB_SLUID in its Prolog's environment:\n%s", id, b)
}

// slurmCgroupRoot is where node n's slurmd makes its jobs' cgroups, as the
// node sees it: Debian builds Slurm for several slurmd per host
// (MULTIPLE_SLURMD), which names the scope after the node; SchedMD's
// release built as sites build it has one slurmd per host.
func (n *node) slurmCgroupRoot() string {
	if !slurm.multipleSlurmd {
		return "/sys/fs/cgroup/system.slice/slurmstepd.scope"
	}
	return "/sys/fs/cgroup/system.slice/" + n.Name + "_slurmstepd.scope"
}
