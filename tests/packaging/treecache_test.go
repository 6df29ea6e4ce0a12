package packaging

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/tree-cache.sh keeps the trees a build fetches from Debian's
// archive (the Debian 13 root, NVIDIA's packages, the container image) and
// Apptainer's install as tarballs in the machine's cache. The callers build
// the tree again whenever unpack fails, so a tarball that cannot be read (a
// disk that filled while it was written, a machine that lost power) must
// fail unpack cleanly: no half-unpacked tree left, and the tarball gone so
// the rebuild writes a good one.

func treeCache(t *testing.T, args ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs("../../scripts/tree-cache.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	return string(out), err
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestTreeCacheRoundTrip(t *testing.T) {
	need(t, "zstd")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "bin", "tool"), []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	old := filepath.Join(cache, "tree-old.tar.zst")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("an older key"), 0o644); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(cache, "tree-new.tar.zst")
	if out, err := treeCache(t, "save", tarball, src, "tree-*.tar.zst"); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("save left the older key's tarball %s (stat: %v)", old, err)
	}

	dst := filepath.Join(dir, "dst")
	if out, err := treeCache(t, "unpack", tarball, dst); err != nil {
		t.Fatalf("unpack: %v\n%s", err, out)
	}
	fi, err := os.Stat(filepath.Join(dst, "bin", "tool"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("unpacked mode %v, want 0750", fi.Mode().Perm())
	}

	if out, err := treeCache(t, "unpack", filepath.Join(cache, "absent.tar.zst"), dst); exitCode(err) != 1 {
		t.Errorf("unpack of a missing tarball: exit %d, want 1\n%s", exitCode(err), out)
	}
	if _, err := os.Stat(filepath.Join(dst, "bin", "tool")); err != nil {
		t.Errorf("unpack of a missing tarball touched the tree: %v", err)
	}
}

func TestTreeCacheUnreadableTarball(t *testing.T) {
	need(t, "zstd")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Enough data that a cut tarball still holds a whole first block.
	if err := os.WriteFile(filepath.Join(src, "data"), []byte(strings.Repeat("gpuslice ", 1<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "cache", "tree-key.tar.zst")
	if out, err := treeCache(t, "save", tarball, src, "tree-*.tar.zst"); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	b, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tarball, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(dir, "dst")
	out, err := treeCache(t, "unpack", tarball, dst)
	if exitCode(err) != 1 {
		t.Errorf("unpack of a cut tarball: exit %d, want 1 (the callers build the tree again)\n%s", exitCode(err), out)
	}
	if !strings.Contains(out, tarball) {
		t.Errorf("unpack of a cut tarball does not name it:\n%s", out)
	}
	for _, p := range []string{dst, dst + ".unpack", tarball} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("unpack of a cut tarball left %s (stat: %v)", p, err)
		}
	}
}
