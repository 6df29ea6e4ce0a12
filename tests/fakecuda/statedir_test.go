package fakecuda

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FAKECUDA_STATE_DIR is where a process sees the node's /dev/shm (a
// container given it at another path, as the real driver's device nodes are
// bound into containers): through it the process shares the node's GPUs;
// a directory that is not the node's /dev/shm is another node; a relative
// path is refused at cuInit.
func TestStateDir(t *testing.T) {
	n := newNode(t, "1GiB")
	holder := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "600MiB", "--count", "1", "--hold", "30")
	defer func() {
		holder.cmd.Process.Signal(syscall.SIGTERM)
		holder.wait(t)
	}()

	// The node's /dev/shm under another name (a symlink stands in for the
	// bind mount a container would have).
	alias := filepath.Join(t.TempDir(), "shm")
	if err := os.Symlink("/dev/shm", alias); err != nil {
		t.Fatal(err)
	}
	r := n.run([]string{"FAKECUDA_STATE_DIR=" + alias}, "target_app", "--step", "100MiB", "--count", "1").ok(t)
	if m := r.all("meminfo")[0]; m.int(t, "free") != 1*GiB-600*MiB {
		t.Errorf("through FAKECUDA_STATE_DIR=%s: %v, want the node's GPU with 600 MiB held", alias, m)
	}

	other := t.TempDir()
	r = n.run([]string{"FAKECUDA_STATE_DIR=" + other}, "target_app", "--step", "100MiB", "--count", "1").ok(t)
	if m := r.all("meminfo")[0]; m.int(t, "free") != 1*GiB {
		t.Errorf("FAKECUDA_STATE_DIR=%s (not the node's): %v, want a GPU of its own, all free", other, m)
	}
	if _, err := os.Stat(filepath.Join(other, "fakecuda-"+n.state)); err != nil {
		t.Errorf("no state in FAKECUDA_STATE_DIR: %v", err)
	}

	r = n.run([]string{"FAKECUDA_STATE_DIR=relative/dir"}, "target_app", "--step", "100MiB", "--count", "1")
	if r.code == 0 || !strings.Contains(r.stderr, "invalid FAKECUDA_STATE_DIR") {
		t.Errorf("a relative FAKECUDA_STATE_DIR: exit %d, stderr %q; want a failure naming it", r.code, r.stderr)
	}
}
