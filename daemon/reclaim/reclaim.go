// Package reclaim watches attached processes: one pidfd per process in one
// epoll set, so the daemon learns of a death the moment it happens, plus
// the /proc helpers the periodic sweep uses to catch anything missed.
package reclaim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// StartTime returns field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot), which tells a process from a later one with the same pid.
func StartTime(pid uint32) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// Proc is what one read of /proc/<pid>/stat says about an attaching
// process.
type Proc struct {
	PPID  uint32 // field 4
	Start uint64 // field 22 (StartTime)
	Image uint64 // ImageToken: 0 when unknown
}

// OpenProc opens a pidfd for pid, then reads its stat once. The pidfd,
// still not readable after the read, proves the read was of the process
// it pins: a pid is reused only once its process is gone, and the pidfd
// of a process that is gone is readable. ErrGone when it exited (before
// or during). The caller owns fd (Watcher.AddPidfd takes it).
func OpenProc(pid uint32) (fd int, p Proc, err error) {
	fd, err = unix.PidfdOpen(int(pid), 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, Proc{}, ErrGone
		}
		return -1, Proc{}, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	var buf [statBufSize]byte
	n, err := readStat(pid, buf[:])
	if err == nil {
		p, err = parseProc(buf[:n])
	}
	if err == nil {
		var gone bool
		if gone, err = PidfdExited(fd); err == nil && gone {
			err = ErrGone
		}
	} else if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		err = ErrGone
	}
	if err != nil {
		unix.Close(fd)
		return -1, Proc{}, err
	}
	return fd, p, nil
}

// PidfdExited polls pidfd fd without waiting: true once its process has
// exited (every thread of it: a zombie leader whose other threads run has
// not).
func PidfdExited(fd int) (bool, error) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err != unix.EINTR {
			return err == nil && n > 0 && pfd[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, err
		}
	}
}

func parseProc(b []byte) (Proc, error) {
	fields, err := statFields(b)
	if err != nil {
		return Proc{}, err
	}
	ppid, err := strconv.ParseUint(string(fields[1]), 10, 32)
	if err != nil {
		return Proc{}, fmt.Errorf("proc stat: ppid: %w", err)
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return Proc{}, fmt.Errorf("proc stat: start time: %w", err)
	}
	return Proc{PPID: uint32(ppid), Start: start, Image: imageToken(fields)}, nil
}

// statFields splits a /proc/<pid>/stat line after the command name (field
// 2, in parentheses, may hold spaces or parentheses: the split starts
// after the last ')'): fields[0] is field 3, the state; at least 20
// fields (field 22, the start time, is fields[19]).
func statFields(b []byte) ([][]byte, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("proc stat: no command field")
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 20 || len(fields[0]) != 1 {
		return nil, errors.New("proc stat: too few fields")
	}
	return fields, nil
}

// statBufSize holds a whole /proc/<pid>/stat line (52 fields, a command
// name of at most 64 bytes).
const statBufSize = 1024

// readStat reads /proc/<pid>/stat into buf with three system calls (no
// os.File: the sweep and every attach read it, and an os.File costs a
// poller registration and fcntl calls besides).
func readStat(pid uint32, buf []byte) (int, error) {
	var path [32]byte
	p := append(append(append(path[:0], "/proc/"...), strconv.FormatUint(uint64(pid), 10)...), "/stat"...)
	fd, err := unix.Open(string(p), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// procStat reads the state (field 3) and start time (field 22) of pid.
func procStat(pid uint32) (state byte, start uint64, err error) {
	var buf [statBufSize]byte
	n, err := readStat(pid, buf[:])
	if err != nil {
		return 0, 0, err
	}
	return parseStat(buf[:n])
}

func parseStartTime(b []byte) (uint64, error) {
	_, st, err := parseStat(b)
	return st, err
}

func parseStat(b []byte) (state byte, start uint64, err error) {
	fields, err := statFields(b)
	if err != nil {
		return 0, 0, err
	}
	start, err = strconv.ParseUint(string(fields[19]), 10, 64)
	return fields[0][0], start, err
}

// Alive reports whether pid runs and is the process that had startTime.
// A process is dead only when all its threads are: a zombie thread-group
// leader (its main thread called pthread_exit) whose other threads still
// run is alive, and so is the memory it holds. A process whose threads
// are all zombies has exited. Only a missing /proc entry or a different
// start time prove a process gone: any other error (EMFILE, ENOMEM, ...)
// answers "alive", so a transient failure never reclaims a live process.
func Alive(pid uint32, startTime uint64) bool {
	state, st, err := procStat(pid)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ESRCH)
	}
	if st != startTime {
		return false
	}
	if state != 'Z' && state != 'X' {
		return true
	}
	return anyThreadRuns(pid)
}

// anyThreadRuns reports whether a thread of pid other than a zombie is
// left. Unreadable task lists answer "yes" (see Alive).
func anyThreadRuns(pid uint32) bool {
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ESRCH)
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/stat")
		if err != nil {
			continue // that thread is gone
		}
		if state, _, err := parseStat(b); err == nil && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// ImageToken identifies the program image pid runs: the addresses of its
// argument and environment strings (/proc/<pid>/stat fields 48 and 50),
// which exec places on a new, randomised stack and which a process cannot
// move without CAP_SYS_RESOURCE. 0 when unknown: unreadable, or read during
// an exec before the new stack is in place (both addresses still 0). Two
// attaches of one process with the same token come from the same image.
func ImageToken(pid uint32) uint64 {
	var buf [statBufSize]byte
	n, err := readStat(pid, buf[:])
	if err != nil {
		return 0
	}
	fields, err := statFields(buf[:n])
	if err != nil {
		return 0
	}
	return imageToken(fields)
}

// imageToken is ImageToken from a stat line's fields (statFields).
func imageToken(fields [][]byte) uint64 {
	if len(fields) < 48 { // field 50 is fields[47]
		return 0
	}
	argStart, err1 := strconv.ParseUint(string(fields[45]), 10, 64)
	envStart, err2 := strconv.ParseUint(string(fields[47]), 10, 64)
	if err1 != nil || err2 != nil || argStart == 0 || envStart == 0 {
		return 0 // unreadable, or an exec has not yet placed the new stack
	}
	return argStart ^ (envStart << 1) ^ (envStart >> 63)
}

// Key identifies a watched process to the exit callback.
type Key struct {
	Session   string
	Slot      int
	PID       uint32
	StartTime uint64
}

// Watcher delivers Key to OnExit when a watched process exits.
//
// Run waits for its epoll set through Go's own poller (the set is itself
// a pollable fd), not in a blocking epoll_wait: a goroutine parked there
// holds no thread in a system call. One that did kept the runtime's
// monitor thread waking every 20 us for as long as processes attached
// (it takes back the processor of a thread in a system call whenever the
// others are busy): ~7,000 wake-ups a second on a 2-core node during a
// burst of attaches, each taking a core from the job's processes.
type Watcher struct {
	epfd   int
	epf    *os.File // epfd, registered with Go's poller (Run)
	polled bool     // it is: else Run waits in epoll_wait as it must
	wakefd int
	onExit func(Key)

	mu    sync.Mutex
	seq   int32 // tags each registration in the epoll data (EpollEvent.Pad)
	byFD  map[int32]watched
	byKey map[Key]int
	exits exitLog // the watched processes that exited lately (exits.go)
	done  chan struct{}
}

type watched struct {
	key Key
	seq int32
}

// NewWatcher creates the epoll set; Run must be called to deliver events.
func NewWatcher(onExit func(Key)) (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("epoll set: %w", err)
	}
	epf := os.NewFile(uintptr(epfd), "reclaim-epoll")
	// A file the poller could not take has no deadlines.
	polled := epf.SetReadDeadline(time.Time{}) == nil
	return &Watcher{epfd: epfd, epf: epf, polled: polled, wakefd: wakefd, onExit: onExit,
		byFD: map[int32]watched{}, byKey: map[Key]int{}, done: make(chan struct{})}, nil
}

// ErrGone means the process had already exited when Add was called.
var ErrGone = errors.New("process is gone")

// Add starts watching k.PID. It returns ErrGone when the process no longer
// exists or is not the one with k.StartTime. Other errors (no pidfd
// support) leave the process to the /proc sweep.
func (w *Watcher) Add(k Key) error {
	fd, p, err := OpenProc(k.PID)
	if err != nil {
		return err
	}
	if p.Start != k.StartTime { // the pid now names another process
		unix.Close(fd)
		return ErrGone
	}
	return w.AddPidfd(k, fd)
}

// AddPidfd watches k through fd, a pidfd of k's process (OpenProc), which
// it takes: closed when the watch ends or cannot start.
func (w *Watcher) AddPidfd(k Key, fd int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byKey[k]; ok {
		unix.Close(fd)
		return nil
	}
	w.seq++
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: w.seq}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return fmt.Errorf("epoll_ctl(pidfd %d): %w", k.PID, err)
	}
	w.byFD[int32(fd)] = watched{key: k, seq: w.seq}
	w.byKey[k] = fd
	return nil
}

// Remove stops watching k (detach, release).
func (w *Watcher) Remove(k Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if fd, ok := w.byKey[k]; ok {
		w.drop(fd, k)
	}
}

func (w *Watcher) drop(fd int, k Key) {
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	unix.Close(fd)
	delete(w.byFD, int32(fd))
	delete(w.byKey, k)
}

// Exited reports whether watched process k has exited, from its pidfd,
// which is readable once every thread of the process is gone (a zombie
// leader whose other threads run is not). known is false when k is not
// watched (or the poll failed): the caller asks /proc (Alive). One poll
// instead of reading /proc/<pid>/stat: the sweep's check of every
// attached process.
func (w *Watcher) Exited(k Key) (exited, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd, ok := w.byKey[k]
	if !ok {
		return false, false
	}
	gone, err := PidfdExited(fd)
	return gone, err == nil
}

// Len is the number of watched processes.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byKey)
}

// Run delivers exits until Close. It blocks one OS thread in epoll_wait.
func (w *Watcher) Run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 64)
	var gone []Key
	rc, err := w.epf.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var werr error
		if w.polled {
			// Take what is ready without waiting; only when nothing is
			// does the goroutine park in the poller until the set is
			// readable again.
			err = rc.Read(func(fd uintptr) bool {
				n, werr = unix.EpollWait(int(fd), events, 0)
				return werr != nil && !errors.Is(werr, unix.EINTR) || n > 0
			})
		} else {
			n, werr = unix.EpollWait(w.epfd, events, -1)
			if errors.Is(werr, unix.EINTR) {
				continue
			}
		}
		if err == nil {
			err = werr
		}
		if err != nil {
			return
		}
		gone = gone[:0]
		w.mu.Lock()
		for _, ev := range events[:n] {
			if int(ev.Fd) == w.wakefd {
				w.mu.Unlock()
				return
			}
			// An event read before the lock may belong to a pidfd that was
			// removed meanwhile and whose number a new process now has:
			// only the registration it was queued for counts.
			if e, ok := w.byFD[ev.Fd]; ok && e.seq == ev.Pad {
				w.drop(int(ev.Fd), e.key)
				gone = append(gone, e.key)
			}
		}
		if len(gone) > 0 {
			now := time.Now()
			for _, k := range gone {
				w.exits.add(k, now)
			}
		}
		w.mu.Unlock()
		for _, k := range gone {
			w.onExit(k)
		}
	}
}

// Close stops Run and closes every pidfd.
func (w *Watcher) Close() {
	var one [8]byte
	one[0] = 1
	unix.Write(w.wakefd, one[:])
	<-w.done
	w.mu.Lock()
	for k, fd := range w.byKey {
		w.drop(fd, k)
	}
	w.mu.Unlock()
	w.epf.Close()
	unix.Close(w.wakefd)
}
