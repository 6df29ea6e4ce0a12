package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// buildDir runs scripts/build-dir.sh for the checkout at root, with its
// directories for closed checkouts under home.
func buildDir(t *testing.T, home, root string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(t), "scripts", "build-dir.sh"), root)
	cmd.Env = append(os.Environ(), "GPUSLICE_BUILD_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build-dir.sh %s: %v", root, err)
	}
	return strings.TrimSpace(string(out))
}

// runAsNobody runs prog as uid 65534 and returns what it printed.
func runAsNobody(prog string) (string, error) {
	cmd := exec.Command(prog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBuildDirForClosedCheckout: a checkout other users cannot enter (a
// clone under /root, mode 0700) keeps its build outputs where they can, so
// the tests' job users can run them; build/ links there. A fresh checkout
// at a path used before starts empty; an open checkout keeps build/.
func TestBuildDirForClosedCheckout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it asks as another user what that user can enter")
	}
	home, err := os.MkdirTemp("", "gpuslice-builddir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	os.Chmod(home, 0o755)
	closed := t.TempDir() // 0700: closed to other users
	root := filepath.Join(closed, "repo")
	prog := filepath.Join("bin", "hello")
	if err := os.MkdirAll(filepath.Join(root, "build", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "build", prog), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := runAsNobody(filepath.Join(root, "build", prog)); err == nil {
		t.Fatal("another user ran a program in a closed checkout: the test cannot show anything")
	}

	// An earlier build/ is moved where others can run it, and linked.
	got := buildDir(t, home, root)
	if !strings.HasPrefix(got, home+"/") || filepath.Base(got) != "build" {
		t.Fatalf("build directory %s, want one under %s named build", got, home)
	}
	if l, err := os.Readlink(filepath.Join(root, "build")); err != nil || l != got {
		t.Fatalf("build/ links to %q (%v), want %s", l, err, got)
	}
	if out, err := runAsNobody(filepath.Join(got, prog)); err != nil || out != "hello\n" {
		t.Fatalf("another user running %s: %q, %v", filepath.Join(got, prog), out, err)
	}

	// Asked again (every make): the same directory, outputs kept.
	if again := buildDir(t, home, root); again != got {
		t.Fatalf("second call: %s, want %s", again, got)
	}
	if _, err := os.Stat(filepath.Join(got, prog)); err != nil {
		t.Fatalf("second call lost the outputs: %v", err)
	}

	// The checkout moved: its outputs follow it, the old directory goes.
	moved := filepath.Join(closed, "moved")
	if err := os.Rename(root, moved); err != nil {
		t.Fatal(err)
	}
	after := buildDir(t, home, moved)
	if after == got || !strings.HasPrefix(after, home+"/") {
		t.Fatalf("moved checkout: %s, want a new directory under %s", after, home)
	}
	if _, err := os.Stat(filepath.Join(after, prog)); err != nil {
		t.Fatalf("moved checkout lost its outputs: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(got)); !os.IsNotExist(err) {
		t.Fatalf("moved checkout: the old directory %s stays (%v)", filepath.Dir(got), err)
	}
	if err := os.Rename(moved, root); err != nil {
		t.Fatal(err)
	}
	if back := buildDir(t, home, root); back != got {
		t.Fatalf("moved back: %s, want %s", back, got)
	}

	// A fresh clone at the same path (no build/): the old outputs are gone.
	if err := os.Remove(filepath.Join(root, "build")); err != nil {
		t.Fatal(err)
	}
	if fresh := buildDir(t, home, root); fresh != got {
		t.Fatalf("fresh clone: %s, want %s", fresh, got)
	}
	if ents, err := os.ReadDir(got); err != nil || len(ents) != 0 {
		t.Fatalf("fresh clone's build directory holds %d entries (%v), want none", len(ents), err)
	}

	// A checkout that is gone (a CI clone removed after its run): its
	// directory is removed when another closed checkout makes its own.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(closed, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	buildDir(t, home, other)
	if _, err := os.Stat(filepath.Dir(got)); !os.IsNotExist(err) {
		t.Fatalf("the removed checkout's directory %s stays (%v)", filepath.Dir(got), err)
	}

	// A checkout others can enter keeps its own build/.
	open := filepath.Join(home, "open")
	if err := os.MkdirAll(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if b := buildDir(t, home, open); b != filepath.Join(open, "build") {
		t.Fatalf("open checkout: %s, want %s", b, filepath.Join(open, "build"))
	}
	if _, err := os.Lstat(filepath.Join(open, "build")); !os.IsNotExist(err) {
		t.Fatalf("open checkout: build/ made (%v)", err)
	}
}
