package slurm

// The network of the test hosts: the run's names, bridge and subnet, each
// node's network namespace (a veth on the bridge) and the process holding
// its UTS and mount namespaces, and their removal.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/debroot"
)

// hostNet names what one run of the suite owns on the machine: its
// network namespaces (<tag>-<node>), bridge (<tag>br0), veths (<tag>h<i>,
// <tag>c<i>), subnet (<subnet>.0/24: the bridge, slurmctld's address, is
// .1, the nodes .11, .12, ...), the lock file one run at a time holds, and
// the prefix of its directory in /tmp. The run on Slurm 22.05 and the run
// on Slurm 24.11 have their own, so both may run at once on one machine.
type hostNet struct {
	tag    string
	subnet string
	lock   string
	tmp    string
}

var (
	net2205 = hostNet{tag: "gs8", subnet: "10.77.0", lock: "/run/gpuslice-gs8-suite.lock", tmp: "gpuslice-slurm-"}
	net2411 = hostNet{tag: "gs13", subnet: "10.78.0", lock: "/run/gpuslice-gs13-suite.lock", tmp: "gpuslice-slurm24-"}
)

// This run's names (useNet).
var (
	netTag      string
	netnsPrefix string
	bridgeName  string
	bridgeAddr  string
	subnetAddr  string
	lockFile    string
	tmpPrefix   string
)

const subnetBits = "24"

// useNet makes h this run's network.
func useNet(h hostNet) {
	netTag, subnetAddr, lockFile, tmpPrefix = h.tag, h.subnet, h.lock, h.tmp
	netnsPrefix, bridgeName, bridgeAddr = h.tag+"-", h.tag+"br0", h.subnet+".1"
}

// nodeAddr is the address of the i-th test host (from 0).
func nodeAddr(i int) string { return fmt.Sprintf("%s.%d", subnetAddr, 11+i) }

// takeLock opens path and waits for its exclusive lock.
func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "slurm suite: waiting for another run holding %s to finish\n", path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return f, nil
}

// setupBridge creates the hosts' bridge with the controller's address.
func setupBridge() error {
	if err := sh("ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
		return err
	}
	if err := sh("ip", "addr", "add", bridgeAddr+"/"+subnetBits, "dev", bridgeName); err != nil {
		return err
	}
	return sh("ip", "link", "set", bridgeName, "up")
}

// setup creates the node's network namespace (veth on the bridge), then a
// process holding new UTS and mount namespaces inside it: hostname = node
// name, the node's runtime directory mounted where jobs look for
// gpusliced's sockets, a private /dev/shm. Every process of the node is
// started in those namespaces (command).
func (n *node) setup() error {
	c := n.c
	ns := netnsPrefix + n.Name
	idx := len(c.nodes)
	host, peer := fmt.Sprintf("%sh%d", netTag, idx), fmt.Sprintf("%sc%d", netTag, idx)
	for _, d := range []string{"run", "state"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns},
		{"ip", "link", "set", host, "master", bridgeName, "up"},
		// Not `ip -n`: it remounts / and /sys, which fails in a chroot.
		{"nsenter", "--net=/run/netns/" + ns, "ip", "addr", "add", n.Addr + "/" + subnetBits, "dev", peer},
		{"nsenter", "--net=/run/netns/" + ns, "ip", "link", "set", peer, "up"},
		{"nsenter", "--net=/run/netns/" + ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := sh(s[0], s[1:]...); err != nil {
			return err
		}
	}
	ready := filepath.Join(n.dir, "ready")
	mounts := "" // the node's own: its munge directory, the soak's state tmpfs
	if nodeMunge() {
		if err := os.MkdirAll(n.mungeDir(), 0o755); err != nil {
			return err
		}
		if err := chownMunge(n.mungeDir()); err != nil {
			return err
		}
		mounts = fmt.Sprintf("mount --bind %s %s && ", n.mungeDir(), c.path("munge"))
	}
	if sz := c.opts.StateTmpfs; sz != "" {
		mounts += fmt.Sprintf("mount -t tmpfs -o mode=0755,size=%s tmpfs %s && ", sz, filepath.Join(n.dir, "state"))
	}
	script := fmt.Sprintf("hostname %s && mount --bind %s %s && %smount -t tmpfs -o mode=1777,size=64m tmpfs /dev/shm && touch %s && exec sleep 86400",
		n.Name, filepath.Join(n.dir, "run"), c.path("gpuslice", "run"), mounts, ready)
	// The node's mounts must not reach the machine: private. In the Debian
	// 13 root, / is no mount point (chroot) so it cannot be made private,
	// but there every mount already is (scripts/trixie-root.sh).
	prop := "private"
	if debroot.Inside() {
		prop = "unchanged"
	}
	if err := n.makeNodeCgroup(); err != nil {
		return err
	}
	cmd := n.holderCommand(prop, script)
	if err := c.start("holder-"+n.Name, cmd); err != nil {
		return err
	}
	if err := waitFor(15*time.Second, func() error {
		_, err := os.Stat(ready)
		return err
	}); err != nil {
		return fmt.Errorf("namespaces not ready: %w", err)
	}
	n.holder = cmd.Process.Pid
	return nil
}

// enterNode are nsenter's arguments that enter node n: its network,
// hostname and mounts, and its root directory (entering a mount namespace
// resets the root to the namespace's own: inside the Debian 13 root that
// would leave the root), with "/" as the working directory.
func (n *node) enterNode() []string {
	a := []string{"-t", strconv.Itoa(n.holder), "--net", "--uts", "--mount", "--root", "--wdns=/"}
	if n.cg != "" {
		a = append(a, "--cgroup")
	}
	return a
}

// command runs name inside the node (its network, hostname, mounts and,
// with cgroups, its cgroup subtree and namespace).
func (n *node) command(name string, args ...string) *exec.Cmd {
	return n.nsenter(nil, name, args...)
}

// removeNetwork deletes this suite's namespaces (killing what still runs
// in them) and its bridge; the veths go with the namespaces.
func removeNetwork() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		pids, _ := exec.Command("ip", "netns", "pids", f[0]).Output()
		for _, p := range strings.Fields(string(pids)) {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
	if exec.Command("ip", "link", "show", bridgeName).Run() == nil {
		_ = exec.Command("ip", "link", "del", bridgeName).Run()
	}
}
