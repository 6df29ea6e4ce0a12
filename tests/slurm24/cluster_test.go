package slurm24

// The cluster inside the Debian 13 root: munged, gpusliced, slurmctld and
// slurmd on loopback (the root shares this machine's network), everything
// under the run's private directory in the root's /tmp. The root's own
// Slurm 24.11 and munge; the project's programs from the build directory
// bind-mounted read-only at debroot.BuildMount.

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

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/debroot"
)

// Users that submit jobs (created in the root when missing).
var testUsers = []string{"gsltest1"}

// Plugin arguments: the largest quota a job may ask for.
const maxQuota = "32G"

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

type testUser struct {
	name     string
	uid, gid uint32
	dir      string
}

type cluster struct {
	build   string
	dir     string
	conf    string
	node    string
	fakeEnv []string
	ipcSock string
	admSock string
	users   map[string]*testUser
	mu      sync.Mutex
	procs   map[string]*proc
}

func (c *cluster) path(p ...string) string { return filepath.Join(append([]string{c.dir}, p...)...) }

// buildDir is GPUSLICE_BUILD_DIR (set inside the root) or <repo>/build.
func buildDir() (string, error) {
	if d := os.Getenv("GPUSLICE_BUILD_DIR"); d != "" {
		return filepath.Abs(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "build"), nil
		}
		if d == filepath.Dir(d) {
			return "", errors.New("go.mod not found above " + wd)
		}
	}
}

// artifacts are the project's programs the cluster uses. The plugin is the
// one built for Slurm 24.11; the 22.05 one is there to be refused.
func (c *cluster) artifacts() map[string]string {
	return map[string]string{
		"plugin":       filepath.Join(c.build, "spank-24.11", "gpuslice.so"),
		"plugin-22.05": filepath.Join(c.build, "spank", "gpuslice.so"),
		"prolog":       filepath.Join(c.build, "bin", "gpuslice-prolog"),
		"epilog":       filepath.Join(c.build, "bin", "gpuslice-epilog"),
		"gpusliced":    filepath.Join(c.build, "bin", "gpusliced"),
		"gpuslice":     filepath.Join(c.build, "bin", "gpuslice"),
		"interceptor":  filepath.Join(c.build, "lib", "libgpuslice.so"),
		"nvml":         filepath.Join(c.build, "lib", "libnvidia-ml.so.1"),
		"target_app":   filepath.Join(c.build, "examples", "target_app"),
	}
}

func (c *cluster) bin(name string) string { return c.artifacts()[name] }

func lookupUser(name string) (*testUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return nil, err
		}
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", "--user-group", name).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("useradd %s: %w: %s", name, err, out)
		}
		if u, err = user.Lookup(name); err != nil {
			return nil, err
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &testUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// startCluster brings everything up inside the root. On error the caller
// still calls stop.
func startCluster(c *cluster) error {
	var err error
	c.procs = map[string]*proc{}
	if c.build, err = buildDir(); err != nil {
		return err
	}
	var missing []string
	for name, p := range c.artifacts() {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, name+" ("+p+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("build artifacts missing (make build spank-24.11): %s", strings.Join(missing, ", "))
	}
	if c.dir = os.Getenv(debroot.WorkEnv); c.dir == "" {
		return errors.New(debroot.WorkEnv + " is not set: run through go test outside the root")
	}
	c.users = map[string]*testUser{}
	for _, n := range testUsers {
		u, err := lookupUser(n)
		if err != nil {
			return err
		}
		c.users[n] = u
	}
	if c.node, err = os.Hostname(); err != nil {
		return err
	}
	c.node, _, _ = strings.Cut(c.node, ".")
	for _, d := range []string{"state", "spool", "log", "run", "gpuslice/run", "gpuslice/state"} {
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
	if err := c.startMunge(); err != nil {
		return err
	}
	if err := c.startGpusliced(); err != nil {
		return err
	}
	if err := c.writeSlurmConfig(c.bin("plugin")); err != nil {
		return err
	}
	if err := c.start("slurmctld", exec.Command("slurmctld", "-D", "-i", "-f", c.conf)); err != nil {
		return err
	}
	if err := c.start("slurmd", exec.Command("slurmd", "-D", "-f", c.conf)); err != nil {
		return err
	}
	return waitFor(90*time.Second, func() error {
		out, err := c.cmd(nil, "sinfo", "-h", "-n", c.node, "-o", "%T").Output()
		if err != nil {
			return fmt.Errorf("sinfo: %w", err)
		}
		if st := strings.TrimSpace(string(out)); st != "idle" {
			return fmt.Errorf("node %s is %q, want idle", c.node, st)
		}
		return nil
	})
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
	sock := filepath.Join(dir, "munge.sock")
	cmd := exec.Command("munged", "--foreground", "--socket="+sock, "--key-file="+keyFile,
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"), "--num-threads=2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := c.start("munged", cmd); err != nil {
		return err
	}
	return waitFor(15*time.Second, func() error {
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("munged socket %s did not appear", sock)
		}
		return nil
	})
}

func (c *cluster) startGpusliced() error {
	c.ipcSock = c.path("gpuslice", "run", "ipc.sock")
	c.admSock = c.path("gpuslice", "run", "admin.sock")
	state := fmt.Sprintf("gpuslice-slurm24-%d", os.Getpid())
	c.fakeEnv = []string{
		"FAKECUDA_DEVICES=80GiB",
		"FAKECUDA_STATE=" + state,
		"FAKECUDA_CTX_BYTES=0", // the cases count allocations only, not context memory
		"LD_LIBRARY_PATH=" + filepath.Join(c.build, "lib"),
	}
	cmd := exec.Command(c.bin("gpusliced"),
		"--runtime-dir", c.path("gpuslice", "run"),
		"--state-dir", c.path("gpuslice", "state"),
		"--ipc-socket", c.ipcSock,
		"--admin-socket", c.admSock,
		"--nvml-library", c.bin("nvml"),
		"--log-level", "debug")
	cmd.Env = append(baseEnv(), c.fakeEnv[:2]...)
	if err := c.start("gpusliced", cmd); err != nil {
		return err
	}
	return waitFor(20*time.Second, func() error {
		_, err := c.gpus()
		return err
	})
}

// writeSlurmConfig writes slurm.conf with plugin in plugstack.conf.
func (c *cluster) writeSlurmConfig(plugin string) error {
	ctldPort, err := freePort()
	if err != nil {
		return err
	}
	slurmdPort, err := freePort()
	for err == nil && slurmdPort == ctldPort {
		slurmdPort, err = freePort()
	}
	if err != nil {
		return err
	}
	wrapper := func(bin string) string {
		return fmt.Sprintf("#!/bin/sh\nexec %s --admin-socket %s --retry-timeout 10s \"$@\"\n", bin, c.admSock)
	}
	if err := writeFile(c.path("prolog.sh"), wrapper(c.bin("prolog")), 0o755); err != nil {
		return err
	}
	if err := writeFile(c.path("epilog.sh"), wrapper(c.bin("epilog")), 0o755); err != nil {
		return err
	}
	if err := c.writePlugstack(plugin); err != nil {
		return err
	}
	cpus := "1"
	if out, err := exec.Command("slurmd", "-C").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(f, "CPUs="); ok {
				cpus = v
			}
		}
	}
	c.conf = c.path("slurm.conf")
	conf := fmt.Sprintf(`# gpuslice smoke test cluster (Slurm 24.11, Debian 13 root)
ClusterName=gpuslice24
SlurmctldHost=%[2]s(127.0.0.1)
SlurmctldPort=%[3]d
SlurmdPort=%[4]d
AuthType=auth/munge
AuthInfo=socket=%[1]s/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool
SlurmctldPidFile=%[1]s/run/slurmctld.pid
SlurmdPidFile=%[1]s/run/slurmd.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=2
MessageTimeout=10
PlugStackConfig=%[1]s/plugstack.conf
Prolog=%[1]s/prolog.sh
Epilog=%[1]s/epilog.sh
PrologFlags=Alloc
NodeName=%[2]s NodeAddr=127.0.0.1 CPUs=%[5]s State=UNKNOWN
PartitionName=test Nodes=%[2]s Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:8
`, c.dir, c.node, ctldPort, slurmdPort, cpus)
	if err := writeFile(c.conf, conf, 0o644); err != nil {
		return err
	}
	// No cgroup plugin is used (proctrack/linuxproc, task/none); 24.11's
	// slurmd would otherwise look for a cgroup hierarchy it may not have
	// in a chroot.
	return writeFile(c.path("cgroup.conf"), "CgroupPlugin=disabled\n", 0o644)
}

// writePlugstack names plugin in plugstack.conf; srun, sbatch and
// slurmstepd read it afresh for each job.
func (c *cluster) writePlugstack(plugin string) error {
	line := fmt.Sprintf("required %s lib=%s socket=%s max=%s\n", plugin, c.bin("interceptor"), c.ipcSock, maxQuota)
	return writeFile(c.path("plugstack.conf"), line, 0o644)
}

// start runs a daemon in its own process group; output to log/<name>.out.
func (c *cluster) start(name string, cmd *exec.Cmd) error {
	out, err := os.OpenFile(c.path("log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.Env == nil {
		cmd.Env = append(baseEnv(), "SLURM_CONF="+c.conf)
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
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return nil
}

func (c *cluster) kill(name string) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (c *cluster) stop() {
	if c.dir == "" {
		return
	}
	if c.conf != "" {
		_ = c.cmd(nil, "scancel", "--full", "--quiet", "--partition=test").Run()
		_ = waitFor(30*time.Second, func() error {
			out, _ := c.cmd(nil, "squeue", "-h", "-o", "%i").Output()
			if strings.TrimSpace(string(out)) != "" {
				return errors.New("jobs still queued")
			}
			return nil
		})
	}
	for _, n := range []string{"slurmd", "slurmctld", "gpusliced", "munged"} {
		c.kill(n)
	}
	killStrays(c.conf)
	for _, f := range c.fakeEnv {
		if v, ok := strings.CutPrefix(f, "FAKECUDA_STATE="); ok {
			matches, _ := filepath.Glob("/dev/shm/*" + v + "*")
			for _, m := range matches {
				_ = os.RemoveAll(m)
			}
		}
	}
}

// killStrays kills processes left behind (a slurmstepd or task of a job
// that did not end): those whose environment or command line names the
// cluster's slurm.conf. This process and its ancestors (whose environment
// names the run's directory) are spared.
func killStrays(conf string) {
	if conf == "" {
		return
	}
	spare := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !spare[pid]; {
		spare[pid] = true
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			break
		}
		// pid (comm) state ppid ...: comm may hold blanks.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			break
		}
		pid, _ = strconv.Atoi(f[1])
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || spare[pid] {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(env, []byte(conf)) || bytes.Contains(cmdline, []byte(conf)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (c *cluster) dumpLogs(w *os.File) {
	if c == nil || c.dir == "" {
		return
	}
	for _, f := range []string{"slurmctld.log", "slurmd.log", "gpusliced.out", "slurmctld.out", "slurmd.out", "munged.out"} {
		b, err := os.ReadFile(c.path("log", f))
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		fmt.Fprintf(w, "----- %s (last %d lines)\n%s\n", f, len(lines), strings.Join(lines, "\n"))
	}
}

func (c *cluster) gpus() ([]client.GPU, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := client.New(c.admSock)
	defer cl.Close()
	return cl.GPUs(ctx)
}

func (c *cluster) session(id string) (*client.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := client.New(c.admSock)
	defer cl.Close()
	return cl.GetSession(ctx, id)
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

// cmd builds a Slurm client command run as u (root when nil) with the
// cluster's SLURM_CONF and the fake GPU's environment.
func (c *cluster) cmd(u *testUser, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(baseEnv(), "SLURM_CONF="+c.conf), c.fakeEnv...)
	cmd.Dir = c.dir
	if u != nil {
		cmd.Dir = u.dir
		cmd.Env = append(cmd.Env, "HOME="+u.dir, "USER="+u.name, "LOGNAME="+u.name)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	}
	return cmd
}

func baseEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C"}
}

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
	if err := cmd.Start(); err != nil {
		return result{stderr: err.Error(), code: -1}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
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
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.code = -1
		r.stderr += err.Error()
	}
	return r
}
