package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The installed example programs find fakecuda by themselves (their
// $ORIGIN/../lib search path leads to /usr/lib/gpuslice/fakecuda), with no
// LD_LIBRARY_PATH: unpacked from the .deb, target_app runs.
func TestInstalledExamplesFindFakecuda(t *testing.T) {
	need(t, "dpkg-deb")
	p := packages(t)
	root := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", p.FakeDeb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	state := "gspkg-examples"
	t.Cleanup(func() { os.Remove("/dev/shm/fakecuda-" + state) })
	cmd := exec.Command(filepath.Join(root, "usr/libexec/gpuslice/examples/target_app"), "--step", "1M", "--count", "2")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "FAKECUDA_DEVICES=1GiB", "FAKECUDA_STATE=" + state}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "event=summary allowed=2") {
		t.Fatalf("installed target_app without LD_LIBRARY_PATH: %v\n%s", err, out)
	}
	link, err := os.Readlink(filepath.Join(root, "usr/libexec/gpuslice/lib"))
	if err != nil || link != "../../lib/gpuslice/fakecuda" {
		t.Fatalf("/usr/libexec/gpuslice/lib: %q, %v", link, err)
	}
}
