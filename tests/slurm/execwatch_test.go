package slurm

// execWatch sees every run of some programs, as the kernel starts them,
// and which processes started it: fanotify marks the programs' files
// with FAN_OPEN_EXEC_PERM, so an execve of one of them waits until the
// watcher has read the process's ancestry from /proc and allowed it. A run
// of a few milliseconds is seen as surely as a long one, whatever path or
// mount namespace (a node's) it is started from, and nothing is put in
// the programs' way (no wrapper, no PATH). Root only. The watcher is a
// process of its own, which ends with the test (execWatchMain).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execRun is one run of a watched program.
type execRun struct {
	Prog string // the program's file
	// Chain is the command name (comm) of the process that exec'd it
	// (still its own before the exec: a fork of its parent), its parent,
	// and so on up to pid 1.
	Chain []string
	// Mine: a process of the chain mentions the cluster's directory in
	// its command line or environment (slurmd's Prolog and Epilog have
	// its SLURM_CONF; the suite's commands too): not another suite's.
	Mine bool
}

// parent is the command name of the process that started the run.
func (r execRun) parent() string {
	if len(r.Chain) > 1 {
		return r.Chain[1]
	}
	return "?"
}

// under reports whether one of names is in the run's ancestry.
func (r execRun) under(names ...string) bool {
	for _, c := range r.Chain {
		for _, n := range names {
			if c == n {
				return true
			}
		}
	}
	return false
}

// metaSize is the size of fanotify's event header.
const metaSize = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))

// The watcher runs in a process of its own (this test binary started
// again, execWatchMain), never in the test's: a Go process that forks a
// watched program (os/exec uses vfork) holds a thread in clone until the
// exec is allowed, and a garbage collection in the watcher would wait for
// that thread forever. The helper forks nothing.
const (
	execWatchEnv   = "GPUSLICE_EXECWATCH_FILES" // the files to watch, colon-separated
	execWatchDir   = "GPUSLICE_EXECWATCH_DIR"   // execRun.mine
	execWatchReady = "ready"
)

func init() {
	if os.Getenv(execWatchEnv) != "" {
		os.Exit(execWatchMain())
	}
}

// execWatch is the test's side: the helper and the runs it reported.
type execWatch struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	mu   sync.Mutex
	runs []execRun
	err  error
	done chan struct{}
}

// watchExecs starts watching the runs of progs (files; missing ones are
// skipped). dir is the cluster's directory. It returns once the files
// are marked.
func watchExecs(dir string, progs []string) (*execWatch, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := &execWatch{cmd: exec.Command(self), done: make(chan struct{})}
	w.cmd.Env = []string{execWatchEnv + "=" + strings.Join(progs, ":"), execWatchDir + "=" + dir}
	w.cmd.Stderr = os.Stderr
	// The helper dies with the test: its marks go with it, and nothing
	// waits on them.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if w.in, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() || sc.Text() != execWatchReady {
		w.in.Close()
		_ = w.cmd.Wait()
		return nil, fmt.Errorf("the exec watcher did not start (%q): see its error above", sc.Text())
	}
	go func() {
		defer close(w.done)
		for sc.Scan() {
			var r execRun
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				w.fail(fmt.Errorf("exec watcher: %q: %w", sc.Text(), err))
				continue
			}
			w.mu.Lock()
			w.runs = append(w.runs, r)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// close stops the helper (runs waiting for an answer are allowed) and
// returns what was seen, and an error if the helper failed.
func (w *execWatch) close() ([]execRun, error) {
	w.in.Close()
	<-w.done
	if err := w.cmd.Wait(); err != nil {
		w.fail(fmt.Errorf("exec watcher: %w", err))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs, w.err
}

func (w *execWatch) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// execWatchMain is the helper: it marks the files, says ready, reports
// each run as a JSON line and exits when its standard input closes.
func execWatchMain() int {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec watcher: fanotify_init: %v\n", err)
		return 1
	}
	marked := 0
	for _, p := range strings.Split(os.Getenv(execWatchEnv), ":") {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD, unix.FAN_OPEN_EXEC_PERM, unix.AT_FDCWD, p); err != nil {
			fmt.Fprintf(os.Stderr, "exec watcher: fanotify_mark %s: %v\n", p, err)
			return 1
		}
		marked++
	}
	if marked == 0 {
		fmt.Fprintf(os.Stderr, "exec watcher: none of %s exists\n", os.Getenv(execWatchEnv))
		return 1
	}
	fmt.Fprintln(os.Stdout, execWatchReady)
	// The answers never wait on the test reading the reports: a test
	// stopped in a garbage collection while a fork of it waits on an
	// answer would never read them.
	var (
		mu      sync.Mutex
		pending [][]byte
		more    = make(chan struct{}, 1)
	)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for {
			_, ok := <-more
			mu.Lock()
			lines := pending
			pending = nil
			mu.Unlock()
			for _, l := range lines {
				_, _ = os.Stdout.Write(l)
			}
			if !ok {
				return
			}
		}
	}()
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	dir := os.Getenv(execWatchDir)
	buf := make([]byte, 64*metaSize)
	for {
		select {
		case <-stop:
			unix.Close(fd) // waiting runs are allowed
			close(more)
			<-written
			return 0
		default:
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 100)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err == nil {
			n, err = unix.Read(fd, buf)
		}
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "exec watcher: fanotify: %v\n", err)
			return 1
		}
		for off := 0; off+metaSize <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Vers != unix.FANOTIFY_METADATA_VERSION || int(m.Event_len) < metaSize {
				fmt.Fprintf(os.Stderr, "exec watcher: fanotify event version %d, length %d\n", m.Vers, m.Event_len)
				return 1
			}
			off += int(m.Event_len)
			if m.Fd < 0 {
				continue
			}
			prog, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(m.Fd)))
			run := describeExec(dir, prog, int(m.Pid))
			resp := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_ALLOW}
			_, werr := unix.Write(fd, (*[unsafe.Sizeof(resp)]byte)(unsafe.Pointer(&resp))[:])
			unix.Close(int(m.Fd))
			if werr != nil {
				fmt.Fprintf(os.Stderr, "exec watcher: fanotify response: %v\n", werr)
				return 1
			}
			b, _ := json.Marshal(run)
			mu.Lock()
			pending = append(pending, append(b, '\n'))
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}
}

// describeExec reads the ancestry of pid, which waits in execve of prog.
func describeExec(dir, prog string, pid int) execRun {
	r := execRun{Prog: prog}
	for i := 0; pid > 0 && i < 64; i++ {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		r.Chain = append(r.Chain, strings.TrimSpace(string(comm)))
		if !r.Mine {
			for _, f := range []string{"cmdline", "environ"} {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f)); err == nil && bytes.Contains(b, []byte(dir)) {
					r.Mine = true
				}
			}
		}
		if pid == 1 {
			break
		}
		pid = ppid(pid)
	}
	return r
}

// ppid is pid's parent (0 when it cannot be read).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// slurmCommandFiles are the files of Slurm's commands that ask slurmctld
// or slurmdbd (the ones SchedMD's Prolog and Epilog Guide names, and
// sacct), as this run's Slurm installs them: its PATH's and the
// machine's.
func slurmCommandFiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, name := range []string{"sacct", "sacctmgr", "scontrol", "squeue"} {
		dirs := []string{"/usr/bin"}
		for _, d := range strings.Split(strings.TrimSuffix(slurmPath, ":"), ":") {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		for _, d := range dirs {
			p, err := filepath.EvalSymlinks(filepath.Join(d, name))
			if err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
