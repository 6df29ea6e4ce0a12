package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// FullDir mounts a tmpfs of size (as mount takes it: "4m") on a new
// directory for the test's files and returns it with a function that
// fills the filesystem to the last byte and one that frees it again (the
// soak's state-full fault, in a unit test). It needs root; without it the
// test skips.
func FullDir(t *testing.T, size string) (dir string, fill, free func()) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir = t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	fill = func() {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
		f.Close()
	}
	free = func() { _ = os.Remove(filler) }
	return dir, fill, free
}
