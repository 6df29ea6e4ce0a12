// Package debroot runs a Go test binary inside a Debian root made by the
// build (make trixie-root: build/trixie/root, Debian 13 with Slurm 24.11),
// so that one suite can run against that root's Slurm as well as this
// machine's.
//
// A suite's TestMain asks Inside(): outside the root, RunTests copies the
// running test binary into the root, bind-mounts the build directory
// read-only at BuildMount and the source tree read-only at RepoMount
// (GPUSLICE_REPO_DIR inside), and runs the binary there through
// scripts/trixie-root.sh (private mount namespace, chroot) with the same
// -test.* flags; its output is the suite's output and its exit status the
// suite's. Inside the root the suite starts its daemons from the root's
// Slurm and the project's programs under BuildMount.
package debroot

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// insideEnv is set for the test binary run inside the root.
	insideEnv = "GPUSLICE_DEBROOT_INSIDE"
	// BuildMount is where the build directory appears inside the root.
	BuildMount = "/opt/gpuslice/build"
	// RepoMount is where the source tree appears inside the root.
	RepoMount = "/opt/gpuslice/src"
	// WorkEnv names the directory, inside the root, private to this run.
	WorkEnv = "GPUSLICE_DEBROOT_WORK"
)

// ErrSkip marks a root that cannot be had on this machine (not root, the
// Debian archive unreachable when the root was built): the suite skips.
var ErrSkip = errors.New("the Debian 13 root is not available")

// Inside reports whether this process is the test binary run in the root.
func Inside() bool { return os.Getenv(insideEnv) == "1" }

// Options says where the root, the build and the runner script are.
type Options struct {
	Repo  string // repository root (holds scripts/trixie-root.sh)
	Build string // build directory (holds trixie/root)
	// Env is extra NAME=VALUE given to the binary inside (no blanks).
	Env    []string
	Stdout io.Writer
	Stderr io.Writer
}

// Root is the Debian 13 root under build.
func Root(build string) string { return filepath.Join(build, "trixie", "root") }

// Ready checks that the root exists and can be used; an error wrapping
// ErrSkip says why the suite cannot run here.
func Ready(build string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: running in it needs root (chroot, mounts)", ErrSkip)
	}
	if b, err := os.ReadFile(filepath.Join(build, "trixie", "UNREACHABLE")); err == nil {
		return fmt.Errorf("%w: %s", ErrSkip, strings.TrimSpace(string(b)))
	}
	if _, err := os.Stat(filepath.Join(build, "trixie", ".stamp")); err != nil {
		return fmt.Errorf("no Debian 13 root in %s (run make trixie-root): %w", Root(build), err)
	}
	return nil
}

// forwardedFlags are the testing flags the binary inside gets as given.
var forwardedFlags = []string{"test.run", "test.skip", "test.v", "test.timeout", "test.failfast", "test.short", "test.count"}

// testArgs rebuilds the -test.* flags this binary was given.
func testArgs() []string {
	var args []string
	flag.Visit(func(f *flag.Flag) {
		for _, n := range forwardedFlags {
			if f.Name == n {
				args = append(args, "-"+f.Name+"="+f.Value.String())
			}
		}
	})
	return args
}

// RunTests runs this test binary inside the root and returns its exit
// status. flag.Parse must have been called.
func RunTests(o Options) (int, error) {
	if err := Ready(o.Build); err != nil {
		return 0, err
	}
	root := Root(o.Build)
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("debroot: own executable: %w", err)
	}
	// A private directory in the root's /tmp: the binary and whatever the
	// suite keeps there. Its name carries this process's pid, so that one
	// left by a run that was killed can be told from one in use.
	removeStale(filepath.Join(root, "tmp"))
	work, err := os.MkdirTemp(filepath.Join(root, "tmp"), fmt.Sprintf("gs13-%d-", os.Getpid()))
	if err != nil {
		return 0, fmt.Errorf("debroot: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return 0, fmt.Errorf("debroot: %w", err)
	}
	inner := "/tmp/" + filepath.Base(work)
	bin := filepath.Join(work, filepath.Base(self))
	if err := copyFile(self, bin, 0o755); err != nil {
		return 0, err
	}
	env := append([]string{insideEnv + "=1", "GPUSLICE_BUILD_DIR=" + BuildMount, "GPUSLICE_REPO_DIR=" + RepoMount,
		WorkEnv + "=" + inner}, o.Env...)
	cmd := exec.Command(filepath.Join(o.Repo, "scripts", "trixie-root.sh"),
		append([]string{"run", root, filepath.Join(inner, filepath.Base(self))}, testArgs()...)...)
	cmd.Env = append(os.Environ(),
		"TRIXIE_BINDS="+o.Build+":"+BuildMount+":ro "+o.Repo+":"+RepoMount+":ro",
		"TRIXIE_ENV="+strings.Join(env, " "))
	cmd.Dir = o.Repo
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("debroot: run in %s: %w", root, err)
	}
	return 0, nil
}

// removeStale removes the run directories of test processes that no longer
// exist.
func removeStale(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, "gs13-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(filepath.Base(d), "-", 3)[1])
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("debroot: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("debroot: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("debroot: copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("debroot: %w", err)
	}
	return nil
}
