// Package runcgroup ends the cgroup `gpuslice run` starts its command in
// (cgroup v2, gpuslice-run-<session>): whether a process is left in it,
// which, killing them all and removing it. The CLI does it when the run
// ends, gpusliced when the run's own process is gone without doing it.
// As Slurm kills what a step leaves running, nothing a run started
// outlives it.
package runcgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Populated reports whether a process is in cgroup dir (or below it), from
// its cgroup.events.
func Populated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return populated(b)
}

func populated(events []byte) (bool, error) {
	for _, line := range bytes.Split(events, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0", nil
		}
	}
	return false, errors.New("cgroup.events has no populated line")
}

// Procs lists the pids in cgroup dir.
func Procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Kill kills every process in cgroup dir and waits, at most wait, until
// none is left. cgroup.kill (Linux 5.14 and later) kills them all at once,
// those forking meanwhile included; where the kernel has none, each pid in
// cgroup.procs is killed until the list stays empty. A dir already gone
// is no error.
func Kill(dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	ev, err := unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(ev)
	perPid := false
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kill the processes of %s: %w", dir, err)
		}
		perPid = true
	}
	var buf [256]byte
	for {
		n, err := unix.Pread(ev, buf[:], 0)
		if err != nil {
			return fmt.Errorf("read %s/cgroup.events: %w", dir, err)
		}
		busy, err := populated(buf[:n])
		if err != nil || !busy {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			pids, _ := Procs(dir)
			return fmt.Errorf("%s: %d process(es) still in it %v after they were killed (pids %v)", dir, len(pids), wait, pids)
		}
		if perPid {
			pids, _ := Procs(dir)
			for _, pid := range pids {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		// cgroup.events signals a change of populated with POLLPRI; a
		// tenth of a second at most between two reads all the same.
		pfd := []unix.PollFd{{Fd: int32(ev), Events: unix.POLLPRI}}
		unix.Poll(pfd, int(min(left, 100*time.Millisecond)/time.Millisecond)+1)
	}
}

// Remove kills every process in cgroup dir (Kill), then removes it with
// the cgroups its command made below it. A dir already gone is no error.
func Remove(dir string, wait time.Duration) error {
	if err := Kill(dir, wait); err != nil {
		return err
	}
	return rmdirAll(dir)
}

// rmdirAll removes cgroup dir and the cgroups below it, deepest first (a
// cgroup's files go with its directory).
func rmdirAll(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
