package runcgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPopulated(t *testing.T) {
	for _, tc := range []struct {
		events string
		want   bool
		err    bool
	}{
		{"populated 0\nfrozen 0\n", false, false},
		{"populated 1\nfrozen 0\n", true, false},
		{"frozen 0\npopulated 1\n", true, false},
		{"frozen 0\n", false, true},
	} {
		got, err := populated([]byte(tc.events))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("populated(%q) = %v, %v; want %v, error %v", tc.events, got, err, tc.want, tc.err)
		}
	}
}

// v2Root is a writable cgroup v2 hierarchy (as root), else the test is
// skipped: it needs one to make a cgroup.
func v2Root(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC && unix.Access(dir, unix.W_OK) == nil {
			return dir
		}
	}
	t.Skip("no writable cgroup v2 hierarchy (root on a cgroup v2 machine runs this test)")
	return ""
}

// Remove kills every process in the cgroup, one that keeps forking and
// one in a cgroup below included, and removes both cgroups; removing
// again is no error.
func TestRemove(t *testing.T) {
	dir := filepath.Join(v2Root(t), fmt.Sprintf("gpuslice-runcgroup-test-%d", os.Getpid()))
	sub := filepath.Join(dir, "sub")
	for _, d := range []string{dir, sub} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		os.Remove(sub)
		os.Remove(dir)
	})
	var procs []*exec.Cmd
	for _, in := range []string{dir, sub} {
		fd, err := unix.Open(in, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := exec.Command("sh", "-c", `while :; do sleep 617 & sleep 0.01; done`)
		c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		err = c.Start()
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	if busy, err := Populated(dir); err != nil || !busy {
		t.Fatalf("Populated = %v, %v with two processes in it", busy, err)
	}
	if err := Remove(dir, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range procs {
		if err := c.Wait(); err == nil {
			t.Errorf("%v: exited 0, want killed", c.Args)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := Remove(dir, time.Second); err != nil {
		t.Errorf("Remove of a removed cgroup: %v", err)
	}
}
