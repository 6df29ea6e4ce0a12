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

	// The attacker: connects, starts the child with the connection, exits.
	a := exec.Command(self)
	a.Env = append(os.Environ(), "SECURITY_ROLE=connect-handoff", "SECURITY_SOCK="+d.IPCSock, "SECURITY_SESSION="+s.ID)
	a.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attacker.UID, Gid: attacker.GID}}
	// Pipes of its own (not StdinPipe/StdoutPipe, which Wait closes): the
	// child keeps them after the attacker has exited.
	inR, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	a.Stdin, a.Stdout, a.Stderr = inR, outW, os.Stderr
	if err := a.Start(); err != nil {
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
	pid := a.Process.Pid
	if err := a.Wait(); err != nil { // reaped: its pid is free
		t.Fatalf("attacker: %v", err)
	}

	v := reusePid(t, pid, victim)
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

// reusePid starts a process of user u whose pid is pid (free now), by
// setting the kernel's last pid just before the fork; other processes of
// the machine may take it first, so it tries again.
func reusePid(t *testing.T, pid int, u testenv.Account) *exec.Cmd {
	t.Helper()
	const lastPid = "/proc/sys/kernel/ns_last_pid"
	for try := 0; try < 500; try++ {
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
	t.Fatalf("pid %d was not reused in 500 tries", pid)
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
