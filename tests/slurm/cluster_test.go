package slurm

// The test cluster: munged, slurmctld, slurmd and gpusliced on loopback,
// everything in one temporary directory, torn down after the suite (also
// when it fails). Needs root: the daemons run as root (munged as munge) and
// jobs are submitted as dedicated non-root users.

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
)

// Debian packages the suite needs (installed with apt-get when missing).
var debPackages = []string{"slurmctld", "slurmd", "slurm-client", "libslurm-dev", "munge"}

// Users that submit jobs (created with useradd when missing).
var testUsers = []string{"gsltest1", "gsltest2"}

// Plugin arguments: the maximum a job may ask for.
const maxQuota = "32G"

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
	created  bool   // by this run (removed at teardown)
}

type cluster struct {
	build   string   // build dir
	dir     string   // temporary directory holding everything
	conf    string   // slurm.conf
	node    string   // NodeName
	fakeEnv []string // FAKECUDA_* and LD_LIBRARY_PATH for jobs
	state   string   // FAKECUDA_STATE
	ipcSock string
	admSock string
	users   map[string]*testUser
	acct    *accounting // slurmdbd and MariaDB (slurmdbd_test.go); nil: none
	mu      sync.Mutex
	procs   map[string]*proc
}

func (c *cluster) path(p ...string) string { return filepath.Join(append([]string{c.dir}, p...)...) }

// repoBuildDir finds GPUSLICE_BUILD_DIR or <repo root>/build.
func repoBuildDir() (string, error) {
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

func (c *cluster) artifacts() map[string]string {
	return map[string]string{
		"plugin":      filepath.Join(c.build, "spank", "gpuslice.so"),
		"prolog":      filepath.Join(c.build, "bin", "gpuslice-prolog"),
		"epilog":      filepath.Join(c.build, "bin", "gpuslice-epilog"),
		"gpusliced":   filepath.Join(c.build, "bin", "gpusliced"),
		"gpuslice":    filepath.Join(c.build, "bin", "gpuslice"),
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

func lookupUser(name string) (*testUser, error) {
	created := false
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return nil, err
		}
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", "--user-group", name).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("useradd %s: %v: %s", name, err, out)
		}
		if u, err = user.Lookup(name); err != nil {
			return nil, err
		}
		created = true
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &testUser{name: name, uid: uint32(uid), gid: uint32(gid), created: created}, nil
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

// nodeCPUs asks slurmd what it will report, so the node is not marked
// invalid for a CPU count mismatch.
func nodeCPUs() string {
	out, err := exec.Command("slurmd", "-C").Output()
	if err == nil {
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "CPUs=") {
				return strings.TrimPrefix(f, "CPUs=")
			}
		}
	}
	return "1"
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// startCluster brings everything up. On error the caller still calls stop.
func startCluster(c *cluster) error {
	var err error
	c.procs = map[string]*proc{}
	if c.build, err = repoBuildDir(); err != nil {
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
	c.users = map[string]*testUser{}
	for _, n := range testUsers {
		u, err := lookupUser(n)
		if err != nil {
			return err
		}
		c.users[n] = u
	}
	if c.node, err = shortHostname(); err != nil {
		return err
	}

	removeStale()
	if c.dir, err = os.MkdirTemp("/tmp", "gpuslice-slurm-"); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	// Job users must reach slurm.conf, the munge and gpusliced IPC sockets.
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"state", "spool", "log", "run", "gpuslice", "gpuslice/run", "gpuslice/state"} {
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
	acctConf, err := c.prepareAccounting()
	if err != nil {
		return err
	}
	if err := c.writeSlurmConfig(acctConf); err != nil {
		return err
	}
	if err := c.startAccounting(); err != nil {
		return err
	}
	if err := c.start("slurmctld", exec.Command("slurmctld", "-D", "-i", "-f", c.conf)); err != nil {
		return err
	}
	if err := c.start("slurmd", exec.Command("slurmd", "-D", "-f", c.conf)); err != nil {
		return err
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
	c.state = fmt.Sprintf("gpuslice-slurm-%d", os.Getpid())
	c.ipcSock = c.path("gpuslice", "run", "ipc.sock")
	c.admSock = c.path("gpuslice", "run", "admin.sock")
	c.fakeEnv = []string{
		"FAKECUDA_DEVICES=80GiB",
		"FAKECUDA_STATE=" + c.state,
		"FAKECUDA_CTX_BYTES=0", // the cases count allocations only, not context memory
		"LD_LIBRARY_PATH=" + filepath.Join(c.build, "lib"),
	}
	return c.restartGpusliced()
}

// restartGpusliced (re)starts gpusliced on the same directories.
func (c *cluster) restartGpusliced() error {
	cmd := exec.Command(c.bin("gpusliced"),
		"--runtime-dir", c.path("gpuslice", "run"),
		"--state-dir", c.path("gpuslice", "state"),
		"--ipc-socket", c.ipcSock,
		"--admin-socket", c.admSock,
		"--nvml-library", c.bin("nvml"),
		"--recovery-interval", "1s",
		"--log-level", "debug")
	cmd.Env = append(baseEnv(), c.fakeEnv[:2]...) // FAKECUDA_DEVICES, FAKECUDA_STATE
	if err := c.start("gpusliced", cmd); err != nil {
		return err
	}
	return waitFor(20*time.Second, func() error {
		_, err := c.gpus()
		return err
	})
}

func (c *cluster) writeSlurmConfig(acctConf string) error {
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
	// wrappers pass where gpusliced listens.
	// They also keep the environment slurmd gave them, for the tests.
	wrapper := func(bin, name string) string {
		return fmt.Sprintf("#!/bin/sh\nenv > %s/%s-$SLURM_JOB_ID.env\nexec %s --admin-socket %s --retry-timeout %s \"$@\"\n",
			c.path("log"), name, bin, c.admSock, prologRetry)
	}
	if err := writeFile(c.path("prolog.sh"), wrapper(c.bin("prolog"), "prolog"), 0o755); err != nil {
		return err
	}
	if err := writeFile(c.path("epilog.sh"), wrapper(c.bin("epilog"), "epilog"), 0o755); err != nil {
		return err
	}
	plug := fmt.Sprintf("required %s lib=%s socket=%s max=%s\n", c.bin("plugin"), c.bin("interceptor"), c.ipcSock, maxQuota)
	if err := writeFile(c.path("plugstack.conf"), plug, 0o644); err != nil {
		return err
	}
	c.conf = c.path("slurm.conf")
	conf := fmt.Sprintf(`# gpuslice end-to-end test cluster
ClusterName=gpuslicetest
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
%[6]sJobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=3600
SchedulerParameters=defer_batch
KillWait=2
MessageTimeout=10
PlugStackConfig=%[1]s/plugstack.conf
Prolog=%[1]s/prolog.sh
Epilog=%[1]s/epilog.sh
PrologFlags=Alloc
GresTypes=gpu
NodeName=%[2]s NodeAddr=127.0.0.1 CPUs=%[5]s Gres=gpu:1 State=UNKNOWN
PartitionName=test Nodes=%[2]s Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:8
`, c.dir, c.node, ctldPort, slurmdPort, nodeCPUs(), acctConf)
	if err := writeFile(c.conf, conf, 0o644); err != nil {
		return err
	}
	// One gres/gpu, so that jobs asking --gres=gpu:1 reach the Prolog with
	// SLURM_JOB_GPUS. No device cgroup is in use (TaskPlugin=task/none):
	// the file only gives the GPU its index.
	return writeFile(c.path("gres.conf"), "Name=gpu File=/dev/null\n", 0o644)
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

// kill stops a daemon: SIGTERM, then SIGKILL after grace.
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
	if c.dir == "" {
		return
	}
	if c.conf != "" {
		// No job may outlive the suite.
		_ = c.cmd(nil, "scancel", "--full", "--quiet", "--partition=test").Run()
		_ = waitFor(30*time.Second, func() error {
			out, _ := c.cmd(nil, "squeue", "-h", "-o", "%i").Output()
			if strings.TrimSpace(string(out)) != "" {
				return errors.New("jobs still queued")
			}
			return nil
		})
	}
	for _, n := range []string{"slurmd", "slurmctld", "slurmdbd", "mariadbd", "gpusliced", "munged"} {
		c.kill(n, syscall.SIGTERM, 10*time.Second)
	}
	killStrays(c.dir)
	for _, u := range c.users {
		if u.created {
			_ = exec.Command("userdel", u.name).Run()
		}
	}
	if c.state != "" {
		matches, _ := filepath.Glob("/dev/shm/*" + c.state + "*")
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
	}
	if os.Getenv("GPUSLICE_KEEP_TEST_DIR") != "" {
		fmt.Fprintf(os.Stderr, "slurm suite: keeping %s\n", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

// removeStale cleans up after an earlier run that could not tear down
// (killed, or timed out by go test): its daemons died with it (Pdeathsig),
// but job processes and files may remain.
func removeStale() {
	dirs, _ := filepath.Glob("/tmp/gpuslice-slurm-*")
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
		matches, _ := filepath.Glob(fmt.Sprintf("/dev/shm/*gpuslice-slurm-%d*", pid))
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
		_ = os.RemoveAll(d)
	}
}

// killStrays kills processes left behind (slurmstepd of a job that did not
// end) whose command line mentions dir.
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

// cmd builds a Slurm client command, run as u (root when nil), with the
// cluster's SLURM_CONF and the fake GPU environment, in u's directory.
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

// baseEnv is a clean environment for job submission: nothing of the test
// process's own Slurm or gpuslice variables leaks into jobs.
func baseEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C"}
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
