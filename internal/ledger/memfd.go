package ledger

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Seals every ledger memfd carries: its size is fixed for good.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// memfdPrefix starts the name of every ledger memfd ("/memfd:<name>" in
// /proc/<pid>/maps).
const memfdPrefix = "gpuslice:"

// memfdName is "gpuslice:<tag>:<id>.<kind>", tag naming the ledger
// directory, so that a daemon finds its own ledgers again and never those
// of another daemon on the same machine.
func memfdName(dir, id, kind string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return memfdPrefix + hex.EncodeToString(sum[:6]) + ":" + id + "." + kind
}

// newSealed returns a memfd of size bytes starting with data, the rest
// zero, sealed. Only data's pages are written: the rest of the file is a
// hole that costs no memory until a page of it is first written (a slot
// claimed), so an idle ledger costs its two header pages.
func newSealed(name string, data []byte, size int) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	// 0600: a process holding the read-only limits fd cannot reopen it
	// read-write through /proc/self/fd.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("chmod ledger: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("size ledger: %w", err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write ledger: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal ledger: %w", err)
	}
	return f, nil
}

// checkSealed refuses a file that is not a root-owned sealed memfd of
// this size class: only the daemon makes those.
func checkSealed(f *os.File) error {
	got, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("%w: not a sealed memfd: %w", ErrInvalid, err)
	}
	if got&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return fmt.Errorf("%w: memfd is not sealed against resizing", ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat ledger: %w", err)
	}
	if st.Uid != 0 && st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("%w: memfd owned by uid %d", ErrInvalid, st.Uid)
	}
	return nil
}

// reopen opens the file behind f again with flags (through /proc/self/fd).
func reopen(f *os.File, flags int) (*os.File, error) {
	g, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen ledger: %w", err)
	}
	return g, nil
}

// fromFiles maps a daemon-side ledger from its two files (limits and
// counters, both read-write; the caller keeps and closes them). fresh says
// the counters were just created (every slot free, nothing to scan).
//
// When this process may open its own mappings again through
// /proc/self/map_files (CAP_SYS_ADMIN, as the daemon has), the ledger keeps
// no fd at all: the mapping holds the memfds, and OpenFiles opens them
// from it when a client attaches. Otherwise it keeps two fds (limits
// read-only, counters read-write) for as long as it is open.
func fromFiles(id string, lim, ctr *os.File, fresh bool) (*Ledger, error) {
	if err := checkSealed(lim); err != nil {
		return nil, err
	}
	if err := checkSealed(ctr); err != nil {
		return nil, err
	}
	l, err := mapFiles(lim, ctr, true)
	if err != nil {
		return nil, fmt.Errorf("ledger %s: %w", id, err)
	}
	if got := l.Session(); got != id {
		l.Close()
		return nil, fmt.Errorf("ledger %s: %w: names session %q", id, ErrInvalid, got)
	}
	if fresh {
		l.inUse = make([]uint64, (l.nslots+63)/64)
	} else {
		l.initInUse(ctr)
	}
	l.keepCopy()
	if fd, err := l.openMapped(l.lim, os.O_RDONLY); err == nil {
		unix.Close(fd)
		l.fdless = true
		return l, nil
	}
	limRO, err := reopen(lim, os.O_RDONLY)
	if err != nil {
		l.Close()
		return nil, err
	}
	ctrRW, err := reopen(ctr, os.O_RDWR)
	if err != nil {
		limRO.Close()
		l.Close()
		return nil, err
	}
	l.limFile, l.ctrFile = limRO, ctrRW
	return l, nil
}

// selfPID is this process's pid, asked once (os.Getpid is a system call
// each time, and every attach builds two map_files paths).
var selfPID = os.Getpid()

// mappedPath is the /proc/<pid>/map_files entry of mapping m of this
// process: opening it opens the file mapped there.
func mappedPath(m []byte) string {
	start := uintptr(unsafe.Pointer(&m[0]))
	page := uintptr(os.Getpagesize())
	end := (start + uintptr(len(m)) + page - 1) &^ (page - 1) // the mapping ends on a page
	return fmt.Sprintf("/proc/%d/map_files/%x-%x", selfPID, start, end)
}

// openMapped opens the memfd behind mapping m again with flags: a raw fd.
func (l *Ledger) openMapped(m []byte, flags int) (int, error) {
	fd, err := unix.Open(mappedPath(m), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopen ledger mapping: %w", err)
	}
	return fd, nil
}

// link points limPath and ctrPath at this process's mappings (fd-less
// ledger) or open files, through /proc/<pid> (root only), replacing what
// was there.
func (l *Ledger) link(limPath, ctrPath string) error {
	targets := [2]string{}
	if l.fdless {
		targets[0], targets[1] = mappedPath(l.lim), mappedPath(l.ctr)
	} else {
		targets[0] = fmt.Sprintf("/proc/%d/fd/%d", selfPID, l.limFile.Fd())
		targets[1] = fmt.Sprintf("/proc/%d/fd/%d", selfPID, l.ctrFile.Fd())
	}
	for i, p := range []string{limPath, ctrPath} {
		os.Remove(p)
		if err := os.Symlink(targets[i], p); err != nil {
			return fmt.Errorf("link ledger: %w", err)
		}
	}
	l.limPath, l.ctrPath = limPath, ctrPath
	return nil
}

// Live is where a running process maps a ledger: paths under
// /proc/<pid>/map_files that open its two memfds.
type Live struct {
	PID      int
	Limits   string
	Counters string
}

// FindLive scans every process's mappings for the ledgers of dir (after a
// daemon restart: the job processes still map them) and returns them by
// session id. Opening map_files needs CAP_SYS_ADMIN (the daemon is root).
func FindLive(dir string) (map[string]Live, error) {
	tag := memfdName(dir, "", "")
	tag = tag[:strings.LastIndexByte(tag, ':')+1] // "gpuslice:<tag>:"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	out := map[string]Live{}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		scanMaps(pid, "/memfd:"+tag, out)
	}
	for id, lv := range out {
		if lv.Limits == "" || lv.Counters == "" {
			delete(out, id)
		}
	}
	return out, nil
}

func scanMaps(pid int, marker string, out map[string]Live) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		i := bytes.Index(line, []byte(marker))
		if i < 0 {
			continue
		}
		rng, _, _ := bytes.Cut(line, []byte(" "))
		name := strings.TrimSuffix(string(line[i+len(marker):]), " (deleted)")
		dot := strings.LastIndexByte(name, '.')
		if dot <= 0 {
			continue
		}
		id, kind := name[:dot], name[dot+1:]
		lv := out[id]
		if lv.PID != 0 && lv.PID != pid {
			continue // one process's pair is enough
		}
		lv.PID = pid
		path := "/proc/" + strconv.Itoa(pid) + "/map_files/" + string(rng)
		switch kind {
		case "limits":
			lv.Limits = path
		case "counters":
			lv.Counters = path
		default:
			continue
		}
		out[id] = lv
	}
}

// Adopt maps session id's ledger from a process that maps it (FindLive),
// checks it is a root-owned sealed memfd pair naming id, and links it
// into dir again.
func Adopt(dir, id string, lv Live) (*Ledger, error) {
	lim, err := os.OpenFile(lv.Limits, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("adopt ledger %s from pid %d: %w", id, lv.PID, err)
	}
	defer lim.Close()
	ctr, err := os.OpenFile(lv.Counters, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("adopt ledger %s from pid %d: %w", id, lv.PID, err)
	}
	defer ctr.Close()
	l, err := fromFiles(id, lim, ctr, false)
	if err != nil {
		return nil, err
	}
	limPath, ctrPath := Paths(dir, id)
	if err := l.link(limPath, ctrPath); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// ReopensMappings reports whether this process can open its own mappings
// through /proc/self/map_files (CAP_SYS_ADMIN): then ledgers hold no fd
// (fromFiles). It maps a one-page memfd to find out.
func ReopensMappings() bool {
	fd, err := unix.MemfdCreate("gpuslice:probe", unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.Ftruncate(fd, int64(os.Getpagesize())) != nil {
		return false
	}
	m, err := unix.Mmap(fd, 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(m)
	f, err := os.OpenFile(mappedPath(m), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Files returns the ledger's files for a client: limits O_RDONLY, counters
// O_RDWR, owned by the ledger. An fd-less ledger opens them on the first
// call and keeps them open from then on (OpenFiles does not). Nil for a
// ledger obtained with Map.
func (l *Ledger) Files() (limits, counters *os.File) {
	if l.fdless && l.limFile == nil {
		lim, ctr, err := l.OpenFiles()
		if err != nil {
			return nil, nil
		}
		l.limFile, l.ctrFile = FilesOf(lim, ctr)
	}
	return l.limFile, l.ctrFile
}

// FilesOf wraps a ledger's fds (OpenFiles, or an attachment's) as files,
// which then own them.
func FilesOf(limits, counters int) (*os.File, *os.File) {
	return os.NewFile(uintptr(limits), "limits"), os.NewFile(uintptr(counters), "counters")
}

// OpenFiles returns new fds for an attaching client (limits O_RDONLY,
// counters O_RDWR, close-on-exec, numbered 3 or above), which the caller closes with
// unix.Close: duplicated from the ledger's own files, or (fd-less ledger)
// from the fds it opened again from its mappings at the first attach since
// it was last idle.
func (l *Ledger) OpenFiles() (limits, counters int, err error) {
	if l.lim == nil || !l.writable {
		return -1, -1, errors.New("ledger: not a daemon-side ledger")
	}
	var src [2]int
	if l.fdless && (l.limFile == nil || l.ctrFile == nil) {
		if !l.hotOpen {
			lim, err := l.openMapped(l.lim, os.O_RDONLY)
			if err != nil {
				return -1, -1, err
			}
			ctr, err := l.openMapped(l.ctr, os.O_RDWR)
			if err != nil {
				unix.Close(lim)
				return -1, -1, err
			}
			l.hot, l.hotOpen = [2]int{lim, ctr}, true
		}
		src = l.hot
	} else {
		src = [2]int{int(l.limFile.Fd()), int(l.ctrFile.Fd())}
	}
	// Never 0, 1 or 2 (were the daemon started with one of them closed):
	// a zero Attachment's fds are 0, and closing it must close nothing.
	lfd, err := unix.FcntlInt(uintptr(src[0]), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, -1, fmt.Errorf("dup ledger fd: %w", err)
	}
	cfd, err := unix.FcntlInt(uintptr(src[1]), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		unix.Close(lfd)
		return -1, -1, fmt.Errorf("dup ledger fd: %w", err)
	}
	return lfd, cfd, nil
}

// closeHot closes the fds an fd-less ledger keeps while it is in use.
func (l *Ledger) closeHot() {
	if l.hotOpen {
		unix.Close(l.hot[0])
		unix.Close(l.hot[1])
		l.hotOpen = false
	}
}

// HoldsFDs reports whether the ledger keeps fds open (it does when this
// process cannot open its own mappings through /proc/self/map_files).
func (l *Ledger) HoldsFDs() bool { return l.limFile != nil || l.ctrFile != nil }
