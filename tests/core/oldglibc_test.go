package core

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The interceptor is preloaded into every task of a job, whatever glibc the
// job runs on (a container image may be years older than the node). It must
// ask for no glibc symbol version newer than 2.17, and list libdl.so.2 and
// libpthread.so.0, where glibc before 2.34 keeps dlopen and the pthread
// functions. A preloaded library that needs a newer version is a fatal
// loader error: the task would not start at all.
func TestInterceptorGlibcRequirements(t *testing.T) {
	f, err := elf.Open(probe.Lib(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if v := testenv.GlibcVersion(s.Version); v > 2017 {
			t.Errorf("imports %s@%s: needs glibc newer than 2.17", s.Name, s.Version)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libdl.so.2", "libpthread.so.0", "libc.so.6"} {
		found := false
		for _, l := range libs {
			found = found || l == want
		}
		if !found {
			t.Errorf("DT_NEEDED %v lacks %s", libs, want)
		}
	}
}

// A program built for glibc 2.31 and run on glibc 2.31 (its own ld.so and
// libc, from Debian 11) with the interceptor preloaded: it starts, attaches
// to its session and is held to the quota, as on the build machine's glibc.
func TestInterceptorOnOldGlibc(t *testing.T) {
	root := testenv.Artifact(t, filepath.Join("glibc-2.31", "root"))
	lib := filepath.Join(root, "lib", "x86_64-linux-gnu")
	usr := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")
	ldso := filepath.Join(lib, "ld-2.31.so")
	buildLib := filepath.Join(testenv.BuildDir(t), "lib")
	bin := filepath.Join(t.TempDir(), "oldglibc_probe")
	cc := exec.Command("gcc", "--sysroot="+root, "-B"+usr+"/", "-L"+usr, "-L"+lib,
		"-isystem", filepath.Join(root, "usr", "include"), "-O2", "-Wall", "-Werror",
		"-I"+filepath.Join(testenv.RepoRoot(t), "native", "include"),
		"-o", bin, filepath.Join("testdata", "oldglibc_probe.c"),
		"-L"+buildLib, "-Wl,-rpath-link,"+lib, "-lcuda")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build the probe against glibc 2.31: %v\n%s", err, out)
	}

	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 256 * MiB})
	l := openLedger(t, d, sess.ID)
	run := func(env []string) probe.Result {
		t.Helper()
		// The old ld.so runs the program with the old libc; fakecuda
		// (built here with the same compatibility header) is found in
		// build/lib.
		r := probe.Run(t, env, ldso, "--library-path", lib+":"+buildLib, bin)
		if r.Err != nil {
			t.Fatalf("probe on glibc 2.31: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		if v := r.Find(t, "libc", 0).Get("version"); v != "2.31" {
			t.Fatalf("the probe ran on glibc %s, want 2.31", v)
		}
		return r
	}

	r := run(sessionEnv(t, d, sess.ID))
	noStderr(t, "probe", r.Stderr)
	if tot := r.Find(t, "meminfo", 0).Uint(t, "total"); tot != 256*MiB {
		t.Errorf("total %d inside the session, want the quota %d", tot, 256*MiB)
	}
	if s := r.Find(t, "summary", 0); s.Get("allowed") != "4" || s.Get("denied") != "2" {
		t.Errorf("%s, want allowed=4 denied=2 under a 256 MiB quota", s.Line)
	}
	if l.Peak(0) != 256*MiB || l.Denied(0) != 2 {
		t.Errorf("ledger peak %d, denied %d; want %d and 2", l.Peak(0), l.Denied(0), 256*MiB)
	}

	// Without a session the interceptor is inert there too.
	env := append(d.Env(), "LD_PRELOAD="+probe.Lib(t))
	r = run(env)
	noStderr(t, "probe", r.Stderr)
	if s := r.Find(t, "summary", 0); s.Get("allowed") != "6" {
		t.Errorf("%s without a session, want all 6 allowed", s.Line)
	}
}
