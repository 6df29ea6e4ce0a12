package security

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// An attacker's process connects to the IPC socket, hands the connection
// to a child and exits; its pid is given to a process of another user;
// the child then sends ATTACH on the inherited connection. The peer
// credentials the kernel took at connect time name that pid, which is no
// longer the attacker's: gpusliced must not register the victim's process
// in the attacker's session (the audit kills by session membership, so
// the attacker could get the victim killed).
func TestPidReuseAttachRefused(t *testing.T) {
	d := daemon(t)
	attacker := testenv.User(t, testenv.TestUser1)
	victim := testenv.User(t, testenv.TestUser2)
	s := session(t, d, "", attacker.UID, 256*MiB)
	self := publicCopyOfSelf(t)

	// The attacker connects, hands the connection to its child and exits;
	// then a process of the victim takes its pid. The attacker's child is
	// a Go program that may still be starting threads when the pid is
	// freed, and one of them can take it first (seen: a thread of the
	// child holding the pid, 3 runs in 30): then the scenario starts over
	// with a new attacker.
	var (
		stdin *os.File
		lines *bufio.Scanner
		pid   int
		v     *exec.Cmd
	)
	for try := 0; v == nil; try++ {
		if try == 5 {
			t.Fatal("5 attackers' pids were each taken by another process before the victim's")
		}
		stdin, lines, pid = handoff(t, self, d.IPCSock, s.ID, attacker)
		v = reusePid(t, pid, victim)
	}
	t.Logf("pid %d: the attacker's process, then %s's (%s)", pid, victim.Name, v.Path)

	// The child sends ATTACH now.
	fmt.Fprintln(stdin, "attach")
	if !lines.Scan() {
		t.Fatalf("attacker's child said nothing: %v", lines.Err())
	}
	got := lines.Text()
	st, err := d.Client().GetSession(ctx(t), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Processes {
		if int(p.PID) == pid {
			t.Fatalf("%s's process (pid %d) was registered in %s's session %s (attach on the inherited connection: %s)",
				victim.Name, pid, attacker.Name, s.ID, got)
		}
	}
	if !strings.HasPrefix(got, "refused ") {
		t.Fatalf("attach on the inherited connection: %s, want refused", got)
	}
	t.Logf("attach on the inherited connection: %s", got)
}

// handoff starts the attacker as user a: it connects to sock, starts a
// child holding the connection (stdin and stdout shared with the test)
// and exits, reaped here. It returns the child's stdin, its output and
// the attacker's pid, free now.
func handoff(t *testing.T, self, sock, session string, a testenv.Account) (*os.File, *bufio.Scanner, int) {
	t.Helper()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "SECURITY_ROLE=connect-handoff", "SECURITY_SOCK="+sock, "SECURITY_SESSION="+session)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.UID, Gid: a.GID}}
	// Pipes of its own (not StdinPipe/StdoutPipe, which Wait closes): the
	// child keeps them after the attacker has exited.
	inR, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "child ") {
		t.Fatalf("attacker: %q %v", lines.Text(), lines.Err())
	}
	child, _ := strconv.Atoi(strings.TrimPrefix(lines.Text(), "child "))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if err := cmd.Wait(); err != nil { // reaped: its pid is free
		t.Fatalf("attacker: %v", err)
	}
	return stdin, lines, cmd.Process.Pid
}

// reusePid starts a process of user u whose pid is pid (free now), by
// setting the kernel's last pid just before the fork; other processes of
// the machine may take it first, so it tries again. nil when pid is taken
// by another process (or thread), or after 500 tries.
func reusePid(t *testing.T, pid int, u testenv.Account) *exec.Cmd {
	t.Helper()
	const lastPid = "/proc/sys/kernel/ns_last_pid"
	for try := 0; try < 500; try++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Logf("pid %d was taken by another process or thread", pid)
			return nil
		}
		if err := os.WriteFile(lastPid, []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid (%s): %v", lastPid, err)
		}
		v := exec.Command("/bin/sleep", "120")
		v.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
		if err := v.Start(); err != nil {
			t.Fatal(err)
		}
		if v.Process.Pid == pid {
			t.Cleanup(func() { v.Process.Kill(); v.Wait() })
			time.Sleep(50 * time.Millisecond) // exec'd: /proc shows sleep
			return v
		}
		v.Process.Kill()
		v.Wait()
	}
	t.Logf("pid %d was not reused in 500 tries", pid)
	return nil
}

// connectHandoff connects to the IPC socket, starts a child (the test
// binary, role attach-inherited) holding the connection as fd 3 and the
// same stdin and stdout, prints "child <pid>" and exits.
func connectHandoff(sock string) int {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := c.File()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	self, _ := os.Executable()
	ch := exec.Command(self)
	ch.Env = append(os.Environ(), "SECURITY_ROLE=attach-inherited")
	ch.Stdin, ch.Stdout, ch.Stderr = os.Stdin, os.Stdout, os.Stderr
	ch.ExtraFiles = []*os.File{f}
	if err := ch.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("child %d\n", ch.Process.Pid)
	return 0
}

// attachInherited waits for a line on stdin, sends ATTACH on fd 3 and
// prints "attached slot=N" or "refused <error>".
func attachInherited(session string) int {
	bufio.NewReader(os.Stdin).ReadString('\n')
	fc, err := net.FileConn(os.NewFile(3, "ipc"))
	if err != nil {
		fmt.Printf("refused fd 3: %v\n", err)
		return 1
	}
	c := ipc.NewConn(fc.(*net.UnixConn))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	a, err := c.Attach(session, os.Getenv("GPUSLICE_IPC_TOKEN"))
	if err != nil {
		fmt.Printf("refused %v\n", err)
		return 0
	}
	fmt.Printf("attached slot=%d\n", a.Slot)
	return 0
}
