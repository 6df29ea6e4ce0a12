// Package slurm24 is gpuslice's smoke test on Slurm 24.11: Debian 13's
// slurmctld, slurmd and munge in the Debian 13 root the build makes
// (make trixie-root), with this machine's gpusliced, Prolog/Epilog, gpuslice
// CLI, fakecuda and interceptor and the SPANK plugin built for 24.11 (make
// spank-24.11). One node on loopback inside the root. See docs/slurm.md.
//
// The test binary runs twice: started by go test on this machine it runs a
// copy of itself inside the root (internal/debroot), which starts the
// cluster and runs the tests against the root's Slurm.
package slurm24

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/debroot"
)

var (
	cl      *cluster
	skipWhy string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if !debroot.Inside() {
		os.Exit(runOutside(m))
	}
	cl = &cluster{}
	if err := startCluster(cl); err != nil {
		fmt.Fprintf(os.Stderr, "slurm24 suite: cluster setup failed: %v\n", err)
		cl.dumpLogs(os.Stderr)
		cl.stop()
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		cl.dumpLogs(os.Stderr)
	}
	cl.stop()
	os.Exit(code)
}

// runOutside runs this binary in the Debian 13 root; when the root cannot
// be had here, the tests run and skip with the reason.
func runOutside(m *testing.M) int {
	build, err := buildDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm24 suite: %v\n", err)
		return 1
	}
	code, err := debroot.RunTests(debroot.Options{
		Repo: filepath.Dir(build), Build: build, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if errors.Is(err, debroot.ErrSkip) {
		skipWhy = err.Error()
		fmt.Fprintln(os.Stderr, "slurm24 suite: SKIP: "+skipWhy)
		return m.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm24 suite: %v\n", err)
		return 1
	}
	return code
}

// needCluster returns the running cluster or skips the test.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if cl == nil {
		t.Skip(skipWhy)
	}
	return cl
}
