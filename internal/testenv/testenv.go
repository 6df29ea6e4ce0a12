// Package testenv is the shared helper of gpuslice's Go tests: it finds the
// build directory and runs a real gpusliced on private sockets against
// fakecuda's NVML.
//
//	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
//	s, err := d.Client().CreateSession(ctx, client.SessionRequest{...})
//	cmd := exec.Command(...); cmd.Env = append(d.Env(), "GPUSLICE_SESSION="+s.ID)
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := FindRepoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}

// FindRepoRoot is RepoRoot for callers without a test (TestMain).
func FindRepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", errors.New("no go.mod above the working directory " + wd)
		}
	}
}

// BuildDir returns FindBuildDir's directory. It fails the test when the
// directory does not exist (`make build` creates it).
func BuildDir(t testing.TB) string {
	t.Helper()
	dir, err := FindBuildDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("testenv: build directory %s is missing: run `make build` (make test builds first) or set GPUSLICE_BUILD_DIR", dir)
	}
	return dir
}

// FindBuildDir returns $GPUSLICE_BUILD_DIR, or <repo root>/build, absolute
// and, where it exists, with links resolved: build/ is a link when the
// checkout is closed to other users (scripts/build-dir.sh), and the
// programs the tests run as those users are named by the path they can
// follow.
func FindBuildDir() (string, error) {
	dir := os.Getenv("GPUSLICE_BUILD_DIR")
	if dir == "" {
		root, err := FindRepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "build")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	}
	return abs, nil
}

// Artifact returns BuildDir/rel and fails the test when it does not exist.
func Artifact(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(BuildDir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: build artifact %s is missing: run `make build` (make test builds first)", p)
	}
	return p
}

// DaemonOptions configure StartDaemon.
type DaemonOptions struct {
	// Devices is FAKECUDA_DEVICES ("80GiB", "2x80GiB", "80GiB,40GiB"); default "80GiB".
	Devices string
	// Overcommit is --overcommit; 0 keeps the daemon default (1.0).
	Overcommit float64
	// RecoveryInterval is --recovery-interval; default 500ms.
	RecoveryInterval time.Duration
	// DefaultTTL is --default-ttl; 0 keeps the daemon default.
	DefaultTTL time.Duration
	// Token, when set, is the IPC token and is required (GPUSLICE_IPC_TOKEN,
	// GPUSLICE_IPC_TOKEN_REQUIRED=1). Env() does not include it.
	Token string
	// Listen starts the TCP listener for /metrics and /healthz on loopback;
	// the address is in Daemon.Listen.
	Listen bool
	// CtxBytes is FAKECUDA_CTX_BYTES, the device memory each CUDA context
	// costs on the fake node; "" means "0" (no cost: tests count bytes
	// under small quotas), "default" leaves fakecuda's realistic default.
	CtxBytes string
	// ContextProbe runs gpusliced's context probe (build/bin/gpuslice-ctxprobe
	// on fakecuda's driver). Off by default: a session's first process then
	// measures a context's cost itself.
	ContextProbe bool
	// GPUEnv holds settings of the fake node's GPUs (FAKECUDA_NVML_SAMPLE_NS=...):
	// a GPU is the same for every process using it, so they are in the
	// daemon's environment and in Env(). (BaseEnv drops the test's own
	// FAKECUDA_* variables.)
	GPUEnv []string
	// ExtraEnv and ExtraArgs are added to the daemon's environment and flags.
	ExtraEnv  []string
	ExtraArgs []string
}

// Daemon is a running gpusliced.
type Daemon struct {
	t          testing.TB
	Build      string
	Dir        string // private directory holding everything below
	RuntimeDir string
	StateDir   string
	LedgerDir  string
	IPCSock    string
	AdminSock  string
	Listen     string // host:port of the TCP listener, "" when off
	Devices    string
	State      string // FAKECUDA_STATE
	LogPath    string

	opts DaemonOptions
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	cl   *client.Client
}

var counter struct {
	sync.Mutex
	n int
}

func uniqueName() string {
	var b [4]byte
	rand.Read(b[:])
	counter.Lock()
	counter.n++
	n := counter.n
	counter.Unlock()
	return fmt.Sprintf("gstest-%d-%d-%s", os.Getpid(), n, hex.EncodeToString(b[:]))
}

// BaseEnv is the test process's environment without GPUSLICE_*,
// FAKECUDA_*, LD_PRELOAD and LD_LIBRARY_PATH, so children start hermetic.
func BaseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUSLICE_") || strings.HasPrefix(k, "FAKECUDA_") ||
			k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH" || k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// StartDaemon starts gpusliced in a private directory and waits until its
// admin API answers. The daemon is stopped and its files removed at cleanup;
// its log is printed when the test failed.
func StartDaemon(t testing.TB, opts DaemonOptions) *Daemon {
	t.Helper()
	build := BuildDir(t)
	Artifact(t, "bin/gpusliced")
	Artifact(t, "lib/libnvidia-ml.so.1")
	if opts.ContextProbe {
		Artifact(t, "bin/gpuslice-ctxprobe")
	}
	if opts.Devices == "" {
		opts.Devices = "80GiB"
	}
	if opts.RecoveryInterval == 0 {
		opts.RecoveryInterval = 500 * time.Millisecond
	}
	// sun_path holds 108 bytes: keep socket paths short under /tmp.
	dir, err := os.MkdirTemp("/tmp", "gs")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	os.Chmod(dir, 0o755)
	d := &Daemon{t: t, Build: build, Dir: dir, RuntimeDir: filepath.Join(dir, "run"),
		StateDir: filepath.Join(dir, "state"), Devices: opts.Devices, State: uniqueName(),
		LogPath: filepath.Join(dir, "gpusliced.log"), opts: opts}
	d.LedgerDir = filepath.Join(d.RuntimeDir, "ledgers")
	d.IPCSock = filepath.Join(d.RuntimeDir, "ipc.sock")
	d.AdminSock = filepath.Join(d.RuntimeDir, "admin.sock")
	if opts.Listen {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: pick a port: %v", err)
		}
		d.Listen = ln.Addr().String()
		ln.Close()
	}
	t.Cleanup(func() {
		d.Stop()
		// A daemon built with -race reports races in its log.
		if strings.Contains(d.Log(), "WARNING: DATA RACE") {
			t.Errorf("gpusliced reported a data race")
		}
		if t.Failed() {
			if b, err := os.ReadFile(d.LogPath); err == nil {
				t.Logf("gpusliced log (%s):\n%s", d.LogPath, b)
			}
		}
		if d.cl != nil {
			d.cl.Close()
		}
		os.Remove(filepath.Join("/dev/shm", "fakecuda-"+d.State))
		os.RemoveAll(dir)
	})
	d.start()
	return d
}

// Args are the daemon's command-line flags.
func (d *Daemon) Args() []string {
	args := []string{
		"--runtime-dir", d.RuntimeDir, "--state-dir", d.StateDir,
		"--ipc-socket", d.IPCSock, "--admin-socket", d.AdminSock,
		"--nvml-library", filepath.Join(d.Build, "lib", "libnvidia-ml.so.1"),
		"--recovery-interval", d.opts.RecoveryInterval.String(), "--log-level", "debug",
	}
	if d.opts.Overcommit != 0 {
		args = append(args, "--overcommit", strconv.FormatFloat(d.opts.Overcommit, 'g', -1, 64))
	}
	if d.opts.DefaultTTL != 0 {
		args = append(args, "--default-ttl", d.opts.DefaultTTL.String())
	}
	if d.Listen != "" {
		args = append(args, "--listen", d.Listen)
	}
	probe := ""
	if d.opts.ContextProbe {
		probe = filepath.Join(d.Build, "bin", "gpuslice-ctxprobe")
		args = append(args, "--cuda-library", filepath.Join(d.Build, "lib", "libcuda.so.1"))
	}
	args = append(args, "--context-probe", probe)
	return append(args, d.opts.ExtraArgs...)
}

// DaemonEnv is the daemon's environment.
func (d *Daemon) DaemonEnv() []string {
	env := append(BaseEnv(), "FAKECUDA_DEVICES="+d.Devices, "FAKECUDA_STATE="+d.State)
	env = append(env, d.opts.GPUEnv...)
	env = append(env, d.ctxEnv()...)
	if d.opts.Token != "" {
		env = append(env, "GPUSLICE_IPC_TOKEN="+d.opts.Token, "GPUSLICE_IPC_TOKEN_REQUIRED=1")
	}
	return append(env, d.opts.ExtraEnv...)
}

func (d *Daemon) start() {
	d.t.Helper()
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatalf("testenv: %v", err)
	}
	cmd := exec.Command(filepath.Join(d.Build, "bin", "gpusliced"), d.Args()...)
	cmd.Env = d.DaemonEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		d.t.Fatalf("testenv: start gpusliced: %v", err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()
	if d.cl == nil {
		d.cl = client.New(d.AdminSock)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.cl.Health(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			b, _ := os.ReadFile(d.LogPath)
			d.t.Fatalf("testenv: gpusliced exited at start (%v):\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(d.LogPath)
			d.t.Fatalf("testenv: gpusliced did not answer on %s: %v\n%s", d.AdminSock, err, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Env is the environment a child process of the test needs: the hermetic
// base environment plus LD_LIBRARY_PATH=<build>/lib, FAKECUDA_DEVICES,
// FAKECUDA_STATE, FAKECUDA_CTX_BYTES (DaemonOptions.CtxBytes) and
// GPUSLICE_IPC_SOCK. Add GPUSLICE_SESSION, LD_PRELOAD...
func (d *Daemon) Env() []string {
	env := append(BaseEnv(),
		"LD_LIBRARY_PATH="+filepath.Join(d.Build, "lib"),
		"FAKECUDA_DEVICES="+d.Devices,
		"FAKECUDA_STATE="+d.State,
		"GPUSLICE_IPC_SOCK="+d.IPCSock,
	)
	env = append(env, d.opts.GPUEnv...)
	return append(env, d.ctxEnv()...)
}

// ctxEnv is FAKECUDA_CTX_BYTES as DaemonOptions.CtxBytes says.
func (d *Daemon) ctxEnv() []string {
	switch d.opts.CtxBytes {
	case "":
		return []string{"FAKECUDA_CTX_BYTES=0"}
	case "default":
		return nil
	}
	return []string{"FAKECUDA_CTX_BYTES=" + d.opts.CtxBytes}
}

// Client is an admin API client for this daemon.
func (d *Daemon) Client() *client.Client { return d.cl }

// PID of the running daemon (0 when stopped).
func (d *Daemon) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Running reports whether the daemon process is alive.
func (d *Daemon) Running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits for the daemon to die (sockets stay behind).
func (d *Daemon) Kill() {
	d.signal(syscall.SIGKILL, 10*time.Second)
}

// Stop sends SIGTERM and waits for a graceful exit (SIGKILL after 10 s).
func (d *Daemon) Stop() {
	if !d.signal(syscall.SIGTERM, 10*time.Second) {
		d.signal(syscall.SIGKILL, 5*time.Second)
	}
}

// ExitCode is the daemon's exit status after it stopped (-1 while running
// or when killed by a signal).
func (d *Daemon) ExitCode() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.ProcessState == nil {
		return -1
	}
	return d.cmd.ProcessState.ExitCode()
}

func (d *Daemon) signal(sig syscall.Signal, wait time.Duration) bool {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// Restart stops the daemon (if running) and starts it again with the same
// directories and options; it returns when the admin API answers.
func (d *Daemon) Restart() {
	d.t.Helper()
	d.Stop()
	d.start()
}

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

// Context is a test's context for one call to gpusliced or a runtime: 30 s,
// cancelled when the test ends.
func Context(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
