package slurm

// The test cluster: one slurmctld and munged on the host, and slurmd "hosts"
// (with a munged each on SchedMD's releases: nodeMunge)
// each in network, UTS and mount namespaces of their own (a veth on the
// run's bridge: gs8br0, 10.77.0.0/24 on Slurm 22.05; gs13br0, 10.78.0.0/24
// for Slurm 24.11 in the Debian 13 root), with their own gpusliced, runtime directory
// (seen by jobs at the same path on every node, as /run/gpuslice would be),
// /dev/shm (fakecuda's GPU state) and fake GPUs. Everything lives in one
// temporary directory and is torn down after the suite, also when it
// fails, and at the start of the next run when a crashed run left it.
// Needs root: the daemons run as root (munged as munge) and jobs are
// submitted as dedicated non-root users.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Debian packages the suite needs (installed with apt-get when missing).
var debPackages = []string{"slurmctld", "slurmd", "slurm-client", "libslurm-dev", "munge", "iproute2", "lua5.1"}

// Users that submit jobs (internal/testenv makes them when missing).
var testUsers = []string{testenv.TestUser1, testenv.TestUser2}

// Plugin arguments: the maximum a job may ask for.
const maxQuota = "64G"

// NodeSpec describes one slurmd host of the test cluster.
type NodeSpec struct {
	Name    string // NodeName and hostname
	Addr    string // its address on the bridge
	Devices string // FAKECUDA_DEVICES of its gpusliced
	CPUs    int    // CPUs slurmd declares (SlurmdParameters=config_overrides)
	// DriverLimits: its driver has NVML's memory limits per cgroup
	// (fakecuda's FAKECUDA_MEMORY_LIMITS=1), which gpusliced sets on its
	// jobs' cgroups when the cluster runs cgroup v2.
	DriverLimits bool
}

// ClusterOptions configure the test cluster.
type ClusterOptions struct {
	Nodes []NodeSpec
	// Partitions are slurm.conf PartitionName lines; the first is the default.
	Partitions []string
	// PlugstackArgs are the plugin's arguments after lib= and socket=.
	PlugstackArgs string
	// ExtraConf is appended to slurm.conf.
	ExtraConf string
	// Accounting replaces the default accounting lines of slurm.conf
	// (JobAcctGatherType, AccountingStorageType, JobCompType: none), e.g.
	// for a suite that runs slurmdbd.
	Accounting []string
	// AccountingStorageEnforce is slurm.conf's AccountingStorageEnforce
	// with slurmdbd; "" leaves it out (Slurm enforces nothing). slurmctld
	// reads it when it starts only (setAccountingStorageEnforce).
	AccountingStorageEnforce string
	// StateTmpfs, when set, is the size of a tmpfs mounted on each node's
	// gpusliced state directory in the node's mount namespace (the soak
	// fills it).
	StateTmpfs string
	// Ssh runs sshd on each node with pam_slurm_adopt in its PAM stack
	// (sshadopt_test.go) and slurm.conf's PrologFlags=Alloc,Contain (the
	// extern step it adopts logins into); the hostile user (gsltest3)
	// has a key.
	Ssh bool
}

// defaultOptions is the suite's cluster: two hosts, the first with smaller
// GPUs than the second. With GPUSLICE_SLURM_QUAD=1 a third of four GPUs,
// alone in partition quad, where jobs of whole GPUs run beside shares
// (TestWholeGPUBesideShares; the other tests count on two nodes, so the
// suites run it on a cluster of its own).
func defaultOptions() ClusterOptions {
	o := ClusterOptions{
		Nodes: []NodeSpec{
			{Name: "tn1", Addr: nodeAddr(0), Devices: "2x16GiB", CPUs: 24},
			{Name: "tn2", Addr: nodeAddr(1), Devices: "2x40GiB", CPUs: 24, DriverLimits: true},
		},
		Partitions: []string{
			"PartitionName=gpu Nodes=tn1,tn2 Default=YES MaxTime=10 State=UP",
			"PartitionName=big Nodes=tn2 MaxTime=10 State=UP",
		},
		PlugstackArgs: "max=" + maxQuota,
	}
	if os.Getenv("GPUSLICE_SLURM_QUAD") == "1" {
		o.Nodes = append(o.Nodes, NodeSpec{Name: quadNode, Addr: nodeAddr(2), Devices: "4x16GiB", CPUs: 24})
		o.Partitions = append(o.Partitions, "PartitionName=quad Nodes="+quadNode+" MaxTime=10 State=UP")
		o.Ssh = sshWhy() == ""
	}
	return o
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

type testUser struct {
	name     string
	uid, gid uint32
	dir      string // a directory the user owns: job working dir and output
}

// node is one slurmd host.
type node struct {
	NodeSpec
	c      *cluster
	dir    string // its private files: <cluster>/nodes/<name>
	holder int    // pid of the process holding its namespaces
	// cg is its cgroup v2 subtree as the host sees it; "" without
	// cgroups (cgroup_test.go).
	cg string
	// admSock is its gpusliced admin socket as seen from the host.
	admSock string
}

type cluster struct {
	opts     ClusterOptions
	build    string   // build dir
	dir      string   // temporary directory holding everything
	conf     string   // slurm.conf
	ctldHost string   // SlurmctldHost (this machine's short hostname)
	fakeEnv  []string // FAKECUDA_STATE and LD_LIBRARY_PATH for jobs
	state    string   // FAKECUDA_STATE (one per node: /dev/shm is the node's)
	ipcSock  string   // gpusliced's IPC socket as jobs see it on every node
	admSock  string   // gpusliced's admin socket as the Prolog sees it
	nodes    []*node
	users    map[string]*testUser
	acct     *accounting // slurmdbd and MariaDB (slurmdbd_test.go); nil: none
	lock     *os.File
	mu       sync.Mutex
	procs    map[string]*proc
}

func (c *cluster) path(p ...string) string { return filepath.Join(append([]string{c.dir}, p...)...) }

// nodeByName returns the named node, nil if there is none.
func (c *cluster) nodeByName(name string) *node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// repoFile is a file of the source tree (the shipped job_submit.lua):
// under GPUSLICE_REPO_DIR when set (the tree as seen inside the Debian 13
// root), else above the working directory.
func repoFile(rel string) (string, error) {
	if d := os.Getenv("GPUSLICE_REPO_DIR"); d != "" {
		return filepath.Join(d, rel), nil
	}
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}

func (c *cluster) artifacts() map[string]string {
	return map[string]string{
		"plugin":      filepath.Join(c.build, slurm.plugin),
		"prolog":      filepath.Join(c.build, "bin", "gpuslice-prolog"),
		"epilog":      filepath.Join(c.build, "bin", "gpuslice-epilog"),
		"gpusliced":   filepath.Join(c.build, "bin", "gpusliced"),
		"gpuslice":    filepath.Join(c.build, "bin", "gpuslice"),
		"ctxprobe":    filepath.Join(c.build, "bin", "gpuslice-ctxprobe"),
		"interceptor": filepath.Join(c.build, "lib", "libgpuslice.so"),
		"libcuda":     filepath.Join(c.build, "lib", "libcuda.so.1"),
		"nvml":        filepath.Join(c.build, "lib", "libnvidia-ml.so.1"),
		"target_app":  filepath.Join(c.build, "examples", "target_app"),
	}
}

func (c *cluster) bin(name string) string { return c.artifacts()[name] }

func installPackages() error {
	var missing []string
	for _, p := range debPackages {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.HasPrefix(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "slurm suite: installing %v\n", missing)
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	upd := exec.Command("apt-get", "update", "-qq")
	upd.Env = env
	if out, err := upd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %v\n%s", err, out)
	}
	inst := exec.Command("apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	inst.Env = env
	if out, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %v: %v\n%s", missing, err, out)
	}
	return nil
}

// addUser makes a third user (the hostile one) known to the cluster, with a directory
// of its own.
func (c *cluster) addUser(name string) (*testUser, error) {
	u, err := lookupUser(name)
	if err != nil {
		return nil, err
	}
	u.dir = c.path("home-" + name)
	if err := os.MkdirAll(u.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(u.dir, int(u.uid), int(u.gid)); err != nil {
		return nil, err
	}
	c.users[name] = u
	return u, nil
}

func lookupUser(name string) (*testUser, error) {
	a, err := testenv.EnsureUser(name)
	if err != nil {
		return nil, fmt.Errorf("test user %s: %w", name, err)
	}
	return &testUser{name: name, uid: a.UID, gid: a.GID}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func shortHostname() (string, error) {
	out, err := exec.Command("hostname", "-s").Output()
	if err != nil {
		h, herr := os.Hostname()
		if herr != nil {
			return "", herr
		}
		return strings.SplitN(h, ".", 2)[0], nil
	}
	return strings.TrimSpace(string(out)), nil
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func sh(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// startCluster brings everything up. On error the caller still calls stop.
func startCluster(c *cluster, opts ClusterOptions) error {
	var err error
	c.opts = opts
	c.procs = map[string]*proc{}
	if c.build, err = testenv.FindBuildDir(); err != nil {
		return err
	}
	var missing []string
	for name, p := range c.artifacts() {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, name+" ("+p+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("build artifacts missing (run `make build` first): %s", strings.Join(missing, ", "))
	}
	if err := installPackages(); err != nil {
		return err
	}
	// One run at a time owns the run's namespaces and bridge.
	if c.lock, err = takeLock(lockFile); err != nil {
		return err
	}
	removeStale()
	c.users = map[string]*testUser{}
	for _, n := range testUsers {
		u, err := lookupUser(n)
		if err != nil {
			return err
		}
		c.users[n] = u
	}
	if c.ctldHost, err = shortHostname(); err != nil {
		return err
	}
	if c.dir, err = os.MkdirTemp("/tmp", tmpPrefix); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	// Job users must reach slurm.conf, the munge and gpusliced IPC sockets.
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"state", "spool", "log", "run", "dev", "gpuslice/run"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	for _, u := range c.users {
		u.dir = c.path("home-" + u.name)
		if err := os.MkdirAll(u.dir, 0o755); err != nil {
			return err
		}
		if err := os.Chown(u.dir, int(u.uid), int(u.gid)); err != nil {
			return err
		}
	}
	c.state = fmt.Sprintf("%s%d", tmpPrefix, os.Getpid())
	c.ipcSock = c.path("gpuslice", "run", "ipc.sock")
	c.admSock = c.path("gpuslice", "run", "admin.sock")
	c.fakeEnv = []string{"FAKECUDA_STATE=" + c.state, "LD_LIBRARY_PATH=" + filepath.Join(c.build, "lib"),
		"FAKECUDA_CTX_BYTES=0", // the cases count allocations only, not context memory
		"FAKECUDA_DEVICE_NODES=" + c.path("dev")}

	if err := c.makeDevices(); err != nil {
		return err
	}
	if err := c.startMunge(); err != nil {
		return err
	}
	if err := setupBridge(); err != nil {
		return err
	}
	for _, spec := range opts.Nodes {
		n := &node{NodeSpec: spec, c: c, dir: c.path("nodes", spec.Name)}
		n.admSock = filepath.Join(n.dir, "run", "admin.sock")
		c.nodes = append(c.nodes, n)
		if err := n.setup(); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if nodeMunge() {
			if err := n.startMunge(); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
		if err := n.restartGpusliced(); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := n.waitContextCost(); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if err := c.prepareAccounting(); err != nil {
		return err
	}
	if err := c.writeSlurmConfig(); err != nil {
		return err
	}
	if err := c.startAccounting(); err != nil {
		return err
	}
	if err := c.startSlurmctld(); err != nil {
		return err
	}
	if opts.Ssh {
		u, err := c.addUser(testenv.TestUser3)
		if err != nil {
			return err
		}
		if err := c.setupSsh(u); err != nil {
			return err
		}
		for _, n := range c.nodes {
			if err := n.startSshd(); err != nil {
				return err
			}
		}
	}
	for _, n := range c.nodes {
		cmd := n.command("slurmd", append([]string{"-D", "-f", c.conf}, slurm.slurmdArgs(c.build)...)...)
		cmd.Env = n.slurmdEnv()
		if err := c.start("slurmd-"+n.Name, cmd); err != nil {
			return err
		}
	}
	return c.waitNodeState("idle", 90*time.Second)
}

func (c *cluster) startMunge() error {
	mu, err := user.Lookup("munge")
	if err != nil {
		return fmt.Errorf("user munge (from the munge package): %w", err)
	}
	uid, _ := strconv.Atoi(mu.Uid)
	gid, _ := strconv.Atoi(mu.Gid)
	dir := c.path("munge")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// A private key: the suite needs nothing from /etc/munge and works on
	// a machine where munge was never configured.
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		return err
	}
	for _, p := range []string{dir, keyFile} {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	cmd := exec.Command("munged", mungedArgs(dir)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := c.start("munged", cmd); err != nil {
		return err
	}
	return waitSocket(filepath.Join(dir, "munge.sock"))
}

// mungedArgs are munged's arguments with its key, socket and files in dir.
func mungedArgs(dir string) []string {
	return []string{"--foreground", "--socket=" + filepath.Join(dir, "munge.sock"), "--key-file=" + filepath.Join(dir, "munge.key"),
		"--log-file=" + filepath.Join(dir, "munged.log"), "--pid-file=" + filepath.Join(dir, "munged.pid"),
		"--seed-file=" + filepath.Join(dir, "munged.seed"), "--num-threads=2"}
}

func waitSocket(sock string) error {
	return waitFor(15*time.Second, func() error {
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("munged socket %s did not appear", sock)
		}
		return nil
	})
}

// nodeMunge: each node runs a munged of its own, as real hosts do, where
// Slurm is built for one slurmd per host (SchedMD's releases here):
// without MULTIPLE_SLURMD, slurmd refuses a credential its munged has
// decoded before ("_verify_signature: failed decode", replayed), which a
// munged shared by the nodes of a multi-node step would report.
func nodeMunge() bool { return !slurm.multipleSlurmd }

// mungeDir is node n's munge directory, mounted in the node over the
// cluster's (the same socket path in slurm.conf for every host).
func (n *node) mungeDir() string { return filepath.Join(n.dir, "munge") }

// startMunge starts node n's munged with the cluster's key (nodeMunge).
func (n *node) startMunge() error {
	mu, err := user.Lookup("munge")
	if err != nil {
		return fmt.Errorf("user munge (from the munge package): %w", err)
	}
	uid, _ := strconv.Atoi(mu.Uid)
	gid, _ := strconv.Atoi(mu.Gid)
	key, err := os.ReadFile(n.c.path("munge", "munge.key"))
	if err != nil {
		return err
	}
	keyFile := filepath.Join(n.mungeDir(), "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		return err
	}
	if err := os.Chown(keyFile, uid, gid); err != nil {
		return err
	}
	cmd := n.nsenter([]string{"-S", mu.Uid, "-G", mu.Gid}, "munged", mungedArgs(n.c.path("munge"))...)
	if err := n.c.start("munged-"+n.Name, cmd); err != nil {
		return err
	}
	return waitSocket(filepath.Join(n.mungeDir(), "munge.sock"))
}

// startSlurmctld starts the cluster's slurmctld, recovering its state
// (the first start, and each restart: a test's or the soak's).
func (c *cluster) startSlurmctld() error {
	return c.start("slurmctld", exec.Command("slurmctld", "-D", "-i", "-f", c.conf))
}

// restartGpusliced (re)starts the node's gpusliced on the same directories.
func (n *node) restartGpusliced() error {
	c := n.c
	cmd := n.command(c.bin("gpusliced"),
		"--runtime-dir", c.path("gpuslice", "run"),
		"--state-dir", filepath.Join(n.dir, "state"),
		"--ipc-socket", c.ipcSock,
		"--admin-socket", c.admSock,
		"--nvml-library", c.bin("nvml"),
		"--context-probe", c.bin("ctxprobe"),
		"--cuda-library", c.bin("libcuda"),
		"--recovery-interval", "1s",
		"--log-level", "debug",
		// gpusliced records the jobs' figures in Slurm's accounting with
		// the cluster's slurm.conf (written after gpusliced first starts:
		// it reads it at each job's end) and this run's sacct/sacctmgr.
		"--slurm-conf", c.path("slurm.conf"))
	cmd.Args = append(cmd.Args, slurm.acctArgs(c.build)...)
	// A context costs nothing on this cluster, for the daemon's context
	// probe as for the jobs (their environment sets the same).
	cmd.Env = append(baseEnv(), "FAKECUDA_DEVICES="+n.Devices, "FAKECUDA_STATE="+c.state, "FAKECUDA_CTX_BYTES=0",
		"FAKECUDA_DEVICE_NODES="+c.path("dev"))
	if n.DriverLimits {
		// gpusliced is the node's first fakecuda process: its state,
		// which the jobs adopt, is a driver with the calls.
		cmd.Env = append(cmd.Env, "FAKECUDA_MEMORY_LIMITS=1")
	}
	if tracking.cgroup {
		cmd.Args = append(cmd.Args, "--slurm-cgroup-root", n.slurmCgroupRoot())
	}
	if err := c.start("gpusliced-"+n.Name, cmd); err != nil {
		return err
	}
	return waitFor(20*time.Second, func() error {
		_, err := n.gpus()
		return err
	})
}

// waitContextCost waits until the node's gpusliced has measured what a
// context costs on each of its GPUs (its context probe, as installed), so
// that the jobs' first processes charge it without measuring.
func (n *node) waitContextCost() error {
	return waitFor(20*time.Second, func() error {
		gpus, err := n.gpus()
		if err != nil {
			return err
		}
		return api.ContextCostsMeasured(gpus)
	})
}

// makeDevices creates the GPUs' character devices (Slurm's gres/gpu needs
// them to give jobs CUDA_VISIBLE_DEVICES, and ConstrainDevices=yes opens
// or closes them per job) and the driver's nvidiactl and nvidia-uvm, which
// fakecuda opens as NVIDIA's driver does (FAKECUDA_DEVICE_NODES); every
// node uses the same paths. nvidia-uvm's major is dynamic on a real node:
// here 195:253, a number of NVIDIA's that no driver on this machine owns.
func (c *cluster) makeDevices() error {
	for name, dev := range map[string]int{"nvidiactl": 195<<8 | 255, "nvidia-uvm": 195<<8 | 253} {
		p := c.path("dev", name)
		if err := mknod(p, dev); err != nil {
			return err
		}
	}
	// One per GPU fakecuda can have (16), made before any node's
	// gpusliced or job opens them.
	for i := 0; i < 16; i++ {
		p := c.path("dev", fmt.Sprintf("nvidia%d", i))
		if err := mknod(p, 195<<8|i); err != nil {
			return err
		}
	}
	return nil
}

// mknod makes a character device open to everyone (0666, as NVIDIA's are;
// the umask would narrow mknod's mode).
func mknod(p string, dev int) error {
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, dev); err != nil {
		return fmt.Errorf("mknod %s: %w", p, err)
	}
	return os.Chmod(p, 0o666)
}

// slurmConfig asks the node's gpuslice slurm-config for its lines.
func (n *node) slurmConfig(print string) (string, error) {
	c := n.c
	cmd := n.command(c.bin("gpuslice"), "--admin-socket", c.admSock, "slurm-config", "--node", n.Name,
		"--overcommit", "1", "--device-format", c.path("dev", "nvidia%d"), "--print", print)
	cmd.Env = baseEnv()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("gpuslice slurm-config on %s: %v: %s", n.Name, err, ee.Stderr)
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// start runs a daemon in the background in its own process group; its
// output goes to log/<name>.out.
func (c *cluster) start(name string, cmd *exec.Cmd) error {
	out, err := os.OpenFile(c.path("log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.Env == nil {
		cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return nil
}

// kill stops a daemon: sig, then SIGKILL after grace.
func (c *cluster) kill(name string, sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// running reports whether the named daemon is up.
func (c *cluster) running(name string) bool {
	c.mu.Lock()
	p := c.procs[name]
	c.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (c *cluster) stop() {
	if c.dir != "" && c.conf != "" {
		// No job may outlive the suite.
		_ = c.cmd(nil, "scancel", "--full", "--quiet").Run()
		_ = waitFor(30*time.Second, func() error {
			out, _ := c.cmd(nil, "squeue", "-h", "-o", "%i").Output()
			if strings.TrimSpace(string(out)) != "" {
				return errors.New("jobs still queued")
			}
			return nil
		})
	}
	for _, n := range c.nodes {
		c.kill("slurmd-"+n.Name, syscall.SIGTERM, 10*time.Second)
	}
	c.kill("slurmctld", syscall.SIGTERM, 10*time.Second)
	for _, n := range c.nodes {
		c.kill("gpusliced-"+n.Name, syscall.SIGTERM, 10*time.Second)
	}
	c.mu.Lock()
	var rest []string
	for name := range c.procs {
		rest = append(rest, name)
	}
	c.mu.Unlock()
	for _, name := range rest {
		c.kill(name, syscall.SIGTERM, 5*time.Second)
	}
	if c.dir != "" {
		killStrays(c.dir)
	}
	removeNetwork()
	removeNodeCgroups()
	if c.lock != nil {
		_ = syscall.Flock(int(c.lock.Fd()), syscall.LOCK_UN)
		c.lock.Close()
	}
	if c.dir == "" {
		return
	}
	if os.Getenv("GPUSLICE_KEEP_TEST_DIR") != "" {
		fmt.Fprintf(os.Stderr, "slurm suite: keeping %s\n", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

// removeStale cleans up after an earlier run that could not tear down
// (killed, or timed out by go test): its daemons died with it (Pdeathsig),
// but job processes, namespaces, the bridge and files may remain. Called
// with the suite's lock held.
func removeStale() {
	removeNetwork()
	removeNodeCgroups()
	dirs, _ := filepath.Glob("/tmp/" + tmpPrefix + "*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue // still running (another suite), or not ours
		}
		fmt.Fprintf(os.Stderr, "slurm suite: removing %s, left by process %d\n", d, pid)
		killStrays(d)
		matches, _ := filepath.Glob(fmt.Sprintf("/dev/shm/*%s%d*", tmpPrefix, pid))
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
		_ = os.RemoveAll(d)
	}
}

// killStrays kills processes left behind (slurmstepd of a job that did not
// end) whose command line or environment mentions dir.
func killStrays(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(b, []byte(dir)) || bytes.Contains(cmdline, []byte(dir)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cmd builds a Slurm client command on the submit host (the machine
// itself), run as u (root when nil), with the cluster's SLURM_CONF and the
// fake GPU environment, in u's directory.
func (c *cluster) cmd(u *testUser, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(baseEnv(), "SLURM_CONF="+c.conf)
	cmd.Env = append(cmd.Env, c.fakeEnv...)
	cmd.Dir = c.dir
	if u != nil {
		cmd.Dir = u.dir
		cmd.Env = append(cmd.Env, "HOME="+u.dir, "USER="+u.name, "LOGNAME="+u.name)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	}
	return cmd
}

// onNode builds a command that runs on node n (its namespaces) as u (root
// when nil), with the fake GPU environment: what a user logged in to the
// node would run.
func (n *node) onNode(u *testUser, name string, args ...string) *exec.Cmd {
	c := n.c
	cmd := n.command(name, args...)
	cmd.Env = append(baseEnv(), "SLURM_CONF="+c.conf)
	cmd.Env = append(cmd.Env, c.fakeEnv...)
	cmd.Dir = c.dir
	if u != nil {
		// nsenter enters as root, then becomes the user.
		cmd = n.nsenter([]string{"-S", strconv.Itoa(int(u.uid)), "-G", strconv.Itoa(int(u.gid))}, name, args...)
		cmd.Env = append(baseEnv(), "SLURM_CONF="+c.conf)
		cmd.Env = append(cmd.Env, c.fakeEnv...)
		cmd.Dir = u.dir
		cmd.Env = append(cmd.Env, "HOME="+u.dir, "USER="+u.name, "LOGNAME="+u.name)
	}
	return cmd
}

// baseEnv is a clean environment for job submission: nothing of the test
// process's own Slurm or gpuslice variables leaks into jobs.
func baseEnv() []string {
	return []string{"PATH=" + slurmPath + "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C"}
}

// result of a command.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

func run(ctx context.Context, cmd *exec.Cmd) result {
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	err := cmd.Start()
	if err != nil {
		return result{stderr: err.Error(), code: -1}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
		se.WriteString("\n(killed: " + ctx.Err().Error() + ")")
	}
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.stderr += err.Error()
	}
	return r
}

// chownMunge gives path to the munge user.
func chownMunge(path string) error {
	mu, err := user.Lookup("munge")
	if err != nil {
		return fmt.Errorf("user munge (from the munge package): %w", err)
	}
	uid, _ := strconv.Atoi(mu.Uid)
	gid, _ := strconv.Atoi(mu.Gid)
	return os.Chown(path, uid, gid)
}
