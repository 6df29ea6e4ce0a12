package cli

// `gpuslice run` starts its command in a cgroup of its own, made by root
// (/sys/fs/cgroup/gpuslice-run-<session>, or under /sys/fs/cgroup/unified
// on a hybrid machine), and the command is cloned
// straight into it (CLONE_INTO_CGROUP): every process it starts stays
// there, whatever it does with its environment, and gpusliced finds the
// session from the cgroup (daemon/identity), as it finds a Slurm job from
// Slurm's job_<id> cgroup. So a process of the command that drops
// LD_PRELOAD is still attributed to the session and the audit stops it
// when it holds more than the quota. Where no cgroup can be made (not
// root, no writable cgroup v2 hierarchy) the command runs without one and
// one line says what is lost.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/identity"
)

// CgroupRoot is where the cgroup v2 hierarchy is mounted.
var CgroupRoot = "/sys/fs/cgroup"

// runCgroup is the command's cgroup: its directory and an fd of it.
type runCgroup struct {
	dir string
	fd  int
}

// makeRunCgroup makes the cgroup of session id.
func makeRunCgroup(id string) (*runCgroup, error) {
	v2 := filepath.Join(CgroupRoot, identity.V2Dir(CgroupRoot))
	var st unix.Statfs_t
	if err := unix.Statfs(v2, &st); err != nil {
		return nil, err
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("no cgroup v2 hierarchy at %s", v2)
	}
	dir := filepath.Join(v2, identity.RunCgroupPrefix+id)
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) && unix.Rmdir(dir) == nil { // an empty one an earlier run left
		err = os.Mkdir(dir, 0o755)
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

// remove removes the cgroup once the processes in it are gone (the
// command's children may outlive it by a moment); a cgroup still busy
// after that is left, and said so.
func (c *runCgroup) remove() error {
	unix.Close(c.fd)
	var err error
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(20 * time.Millisecond) {
		if err = unix.Rmdir(c.dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	return fmt.Errorf("remove %s: %w (processes of the command still run in it)", c.dir, err)
}
