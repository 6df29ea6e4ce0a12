package ledger

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// newSealed returns a memfd holding data, sealed.
func newSealed(name string, data []byte) (*os.File, error) {
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

// fromFiles maps a daemon-side ledger from its two files (limits read-
// write, counters read-write; both stay open only as the ledger needs).
// ctr becomes the ledger's; lim is the caller's.
func fromFiles(id string, lim, ctr *os.File) (*Ledger, error) {
	if err := checkSealed(lim); err != nil {
		return nil, err
	}
	if err := checkSealed(ctr); err != nil {
		return nil, err
	}
	limRO, err := reopen(lim, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	l, err := mapFiles(lim, ctr, true)
	if err != nil {
		limRO.Close()
		return nil, fmt.Errorf("ledger %s: %w", id, err)
	}
	l.limFile, l.ctrFile = limRO, ctr
	l.initInUse()
	if got := l.Session(); got != id {
		l.limFile, l.ctrFile = nil, nil
		l.Close()
		limRO.Close()
		return nil, fmt.Errorf("ledger %s: %w: names session %q", id, ErrInvalid, got)
	}
	return l, nil
}

// link points limPath and ctrPath at this process's open files (root
// only: /proc/<pid>/fd), replacing what was there.
func (l *Ledger) link(limPath, ctrPath string) error {
	for _, p := range []struct {
		path string
		f    *os.File
	}{{limPath, l.limFile}, {ctrPath, l.ctrFile}} {
		target := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), p.f.Fd())
		os.Remove(p.path)
		if err := os.Symlink(target, p.path); err != nil {
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
	l, err := fromFiles(id, lim, ctr)
	if err != nil {
		ctr.Close()
		return nil, err
	}
	limPath, ctrPath := Paths(dir, id)
	if err := l.link(limPath, ctrPath); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
