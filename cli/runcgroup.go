package cli

// `gpuslice run` starts its command in a cgroup of its own, made by root
// (/sys/fs/cgroup/gpuslice-run-<session>, or under /sys/fs/cgroup/unified
// on a hybrid machine), and the command is cloned
// straight into it (CLONE_INTO_CGROUP): every process it starts stays
// there, whatever it does with its environment, and gpusliced finds the
// session from the cgroup (daemon/identity), as it finds a Slurm job from
// Slurm's job_<id> cgroup. So a process of the command that drops
// LD_PRELOAD is still attributed to the session and the audit stops it
// when it holds more than the quota.
//
// The run owns the cgroup whole: it never starts in one that holds
// processes (another run's, or those an earlier one left: they would be
// counted against this run's quota), and when the command has exited,
// whatever it left running in the cgroup is killed and the cgroup removed,
// as Slurm ends a step (internal/runcgroup). Where no cgroup can be made
// (not root, no writable cgroup v2 hierarchy) the command runs without
// one and one line says what is lost.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/runcgroup"
)

// CgroupRoot is where the cgroup v2 hierarchy is mounted.
var CgroupRoot = "/sys/fs/cgroup"

// runKillWait bounds the wait for the processes of a run's cgroup to be
// gone once killed (one in an uninterruptible sleep in a driver call may
// take a while).
const runKillWait = 30 * time.Second

// runCgroup is the command's cgroup: its directory and an fd of it.
type runCgroup struct {
	dir string
	fd  int
}

// runCgroupDir is the cgroup of session id; an error when there is no
// cgroup v2 hierarchy.
func runCgroupDir(id string) (string, error) {
	v2 := filepath.Join(CgroupRoot, identity.V2Dir(CgroupRoot))
	var st unix.Statfs_t
	if err := unix.Statfs(v2, &st); err != nil {
		return "", err
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("no cgroup v2 hierarchy at %s", v2)
	}
	return filepath.Join(v2, identity.RunCgroupPrefix+id), nil
}

// cgroupBusy is the error of a run whose cgroup holds processes already.
func cgroupBusy(dir string) error {
	which := ""
	if pids, _ := runcgroup.Procs(dir); len(pids) > 0 {
		which = fmt.Sprintf(" (pids %v)", pids)
	}
	return fmt.Errorf("%w: cgroup %s holds processes%s that are not this run's (left by an earlier run with this id): a run never starts beside them; stop them or choose another --id",
		client.ErrConflict, dir, which)
}

// checkRunCgroup fails when the cgroup of session id holds processes
// (asked before the session is made; makeRunCgroup asks again).
func checkRunCgroup(id string) error {
	dir, err := runCgroupDir(id)
	if err != nil {
		return nil // no cgroup to share: makeRunCgroup says so
	}
	if busy, err := runcgroup.Populated(dir); err == nil && busy {
		return cgroupBusy(dir)
	}
	return nil
}

// makeRunCgroup makes the cgroup of session id. One that holds processes
// is an error wrapping client.ErrConflict; an empty one an earlier run
// left is made again.
func makeRunCgroup(id string) (*runCgroup, error) {
	dir, err := runCgroupDir(id)
	if err != nil {
		return nil, err
	}
	err = os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		if busy, perr := runcgroup.Populated(dir); perr == nil && busy {
			return nil, cgroupBusy(dir)
		}
		if runcgroup.Remove(dir, time.Second) == nil {
			err = os.Mkdir(dir, 0o755)
		}
	}
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &runCgroup{dir: dir, fd: fd}, nil
}

// remove kills whatever the command left running in the cgroup, waits
// until it is gone and removes the cgroup.
func (c *runCgroup) remove() error {
	unix.Close(c.fd)
	if err := runcgroup.Remove(c.dir, runKillWait); err != nil {
		return fmt.Errorf("%w: the processes the command left are not stopped", err)
	}
	return nil
}
