// Package security holds one regression test per attack on gpuslice's
// enforcement: each runs the real gpusliced, real processes with the
// interceptor (or without it) and fakecuda, plays the attacker, and checks
// the property the attack threatens (quota held, daemon alive, other users
// served), not the mechanism that defends it.
package security

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

const (
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
)

// The test binary doubles as an attacker program: with SECURITY_ROLE set
// it runs that role instead of the tests (so it can run as another uid).
func TestMain(m *testing.M) {
	if role := os.Getenv("SECURITY_ROLE"); role != "" {
		os.Exit(runRole(role))
	}
	os.Exit(m.Run())
}

func runRole(role string) int {
	switch role {
	case "idle-flood":
		return idleFlood(os.Getenv("SECURITY_SOCK"), os.Getenv("SECURITY_N"))
	case "connect-handoff":
		return connectHandoff(os.Getenv("SECURITY_SOCK"))
	case "attach-inherited":
		return attachInherited(os.Getenv("SECURITY_SESSION"))
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

// idleFlood opens n IPC connections, sends one PING on each, prints
// "ready n=<opened>" and holds them until stdin closes.
func idleFlood(sock, ns string) int {
	n, _ := strconv.Atoi(ns)
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	var conns []*ipc.Conn
	for i := 0; i < n; i++ {
		c, err := ipc.Dial(sock)
		if err != nil {
			break
		}
		if _, err := c.Ping([]byte("x")); err != nil {
			c.Close()
			continue // refused: the daemon closed it
		}
		conns = append(conns, c)
	}
	fmt.Printf("ready n=%d\n", len(conns))
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

var seq atomic.Int64

// ctx is a call's context (testenv.Context).
var ctx = testenv.Context

// needRoot: the tests start processes as other users and a root
// slurmstepd stand-in.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("tests/security must run as root (CI does): they start processes as other uids")
	}
}

// daemon starts gpusliced with a fast audit; extra flags are appended.
func daemon(t *testing.T, extra ...string) *testenv.Daemon {
	t.Helper()
	needRoot(t)
	return testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, RecoveryInterval: 100 * time.Millisecond,
		ExtraArgs: append([]string{"--audit-interval", "50ms"}, extra...)})
}

// session creates a session for uid with quota on every GPU.
func session(t *testing.T, d *testenv.Daemon, id string, uid uint32, quota uint64) *client.Session {
	t.Helper()
	if id == "" {
		id = fmt.Sprintf("sec%d-%d", os.Getpid(), seq.Add(1))
	}
	s, err := d.Client().CreateSession(ctx(t), client.SessionRequest{ID: id, UID: uid, QuotaBytes: quota})
	if err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
	return s
}

// used is what the daemon counts for session id on its first GPU.
func used(t *testing.T, d *testenv.Daemon, id string) uint64 {
	t.Helper()
	s, err := d.Client().GetSession(ctx(t), id)
	if err != nil {
		t.Fatalf("get session %s: %v", id, err)
	}
	return s.GPUs[0].UsedBytes
}

// jobEnv is the environment of a process with the interceptor preloaded
// (GPUSLICE_SESSION only when session is not "").
func jobEnv(t *testing.T, d *testenv.Daemon, session string, extra ...string) []string {
	t.Helper()
	env := append(d.Env(), "LD_PRELOAD="+probe.Lib(t))
	if session != "" {
		env = append(env, "GPUSLICE_SESSION="+session)
	}
	return append(env, extra...)
}

// gsProbe is the scripted CUDA program (native/interceptor/tests).
func gsProbe(t *testing.T) string { return probe.Bin(t, "gs_probe") }

// stepd starts prog under a stand-in for Slurm's slurmstepd of job: a
// root process whose executable is named slurmstepd and whose title is
// "slurmstepd: [<job>.0]" (what Slurm's own step daemon looks like in
// /proc). It is a copy of bash that runs prog as its child and waits.
// asUID, when set, runs prog as that user (setpriv).
func stepd(t *testing.T, job string, env []string, asUser string, prog string, args ...string) *probe.Proc {
	t.Helper()
	needRoot(t)
	argv := []string{prog}
	if asUser != "" {
		u := testenv.User(t, asUser)
		argv = []string{"setpriv", fmt.Sprintf("--reuid=%d", u.UID), fmt.Sprintf("--regid=%d", u.GID), "--clear-groups", prog}
	}
	return probe.StartStepd(t, job, env, append(argv, args...)...)
}

// uidOf is the numeric uid of a test user (made when missing).
func uidOf(t *testing.T, name string) uint32 {
	t.Helper()
	return testenv.User(t, name).UID
}

// asUser prepares a command that runs as the named test user.
func asUser(t *testing.T, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	u := testenv.User(t, name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	return cmd
}

// killedBySIGKILL reports whether a process's exit status is SIGKILL.
func killedBySIGKILL(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// metric reads one sample's value from the daemon's /metrics ("" if absent).
func metric(t *testing.T, d *testenv.Daemon, series string) string {
	t.Helper()
	c := net.Dialer{Timeout: 5 * time.Second}
	conn, err := c.Dial("tcp", d.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(conn)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// startRole starts the test binary in an attacker role.
func startRole(t *testing.T, cmd *exec.Cmd, env []string) *probe.Proc {
	t.Helper()
	return probe.StartCmd(t, cmd, append(testenv.BaseEnv(), env...))
}

// startCmd starts a prepared command with env.
func startCmd(t *testing.T, cmd *exec.Cmd, env []string) *probe.Proc {
	t.Helper()
	return probe.StartCmd(t, cmd, env)
}

// publicCopyOfSelf copies the test binary where any user may run it.
func publicCopyOfSelf(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gssec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	dst := filepath.Join(dir, "security.test")
	probe.CopyFile(t, self, dst, 0o755)
	return dst
}

// probeCmd is gs_probe with steps.
func probeCmd(t *testing.T, steps ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(gsProbe(t), steps...)
}

// pythonCmd runs a Python script with the system's python3.
func pythonCmd(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	return exec.Command("/usr/bin/python3", "-c", script)
}

// counters opens session id's counters file read-write, as the job's
// processes receive it.
func counters(t *testing.T, d *testenv.Daemon, id string) *os.File {
	t.Helper()
	_, path := ledger.Paths(d.LedgerDir, id)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// timeAfter bounds how long a test waits for a daemon to give up.
func timeAfter(t *testing.T) <-chan time.Time {
	t.Helper()
	return time.After(10 * time.Second)
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

type procT = probe.Proc

// probeCmdNamed is one of the interceptor's test programs with args.
func probeCmdNamed(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(probe.Bin(t, name), args...)
}

// attachTo attaches this test process to session id over a new IPC
// connection, as the interceptor does; both are closed at cleanup.
func attachTo(t *testing.T, d *testenv.Daemon, id string) (*ipc.Conn, *ipc.Attachment) {
	t.Helper()
	conn, err := ipc.Dial(d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a, err := conn.Attach(id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return conn, a
}
