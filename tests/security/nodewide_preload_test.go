package security

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// In the node-wide mode (/etc/ld.so.preload) every process of the node
// loads the interceptor, root daemons included. Outside a job it must not
// change what a program prints or how it exits. The battery runs each
// program with and without the library force-loaded (LD_PRELOAD: the same
// loading the node-wide mode does, without touching the machine's
// /etc/ld.so.preload) and with gpusliced answering on the socket the
// library would ask, and compares stdout, stderr and exit codes. CUDA and
// NVML programs outside a job are in the battery too: gpusliced answers
// "no session" and they run exactly as without the library.
func TestNodeWidePreloadChangesNothingOutsideJobs(t *testing.T) {
	d := daemon(t)
	build := testenv.BuildDir(t)
	battery := [][]string{
		{"/bin/sh", "-c", "echo shell; echo err >&2; exit 3"},
		{"/bin/bash", "-c", "for i in 1 2 3; do printf '%s,' $i; done; echo; exit 7"},
		{"/usr/bin/ls", "-la", "/usr"}, // not /: /tmp's time changes while other tests run
		{"/usr/bin/ls", "/nonexistent-path"},
		{"/usr/bin/sort", "-r", "/etc/passwd"},
		{"/usr/bin/cat", "/etc/os-release"},
		{"/usr/bin/sha256sum", "/bin/sh"},
		{"/usr/bin/python3", "-c", "import sys, json, ctypes; print(json.dumps({'a': [1, 2]})); sys.exit(5)"},
		{"/usr/bin/ssh", "-V"},
		{"/usr/sbin/slurmd", "-V"},
		{build + "/bin/gpusliced", "--version"},
		{build + "/bin/gpusliced", "--overcommit", "nan"},
		{build + "/bin/gpuslice", "--help"},
		{build + "/examples/nvml_query"},
		{build + "/examples/target_app"},
		{build + "/examples/dlopen_driver"},
	}
	plainEnv := d.Env()
	preEnv := append(d.Env(), "LD_PRELOAD="+probe.Lib(t))
	for _, argv := range battery {
		t.Run(strings.TrimPrefix(strings.Join(argv, " "), build+"/"), func(t *testing.T) {
			a := run(argv, plainEnv)
			b := run(argv, preEnv)
			if a.code != b.code {
				t.Errorf("exit code %d without the library, %d with it", a.code, b.code)
			}
			if a.stdout != b.stdout {
				t.Errorf("stdout differs:\nwithout:\n%s\nwith:\n%s", a.stdout, b.stdout)
			}
			if a.stderr != b.stderr {
				t.Errorf("stderr differs:\nwithout:\n%s\nwith:\n%s", a.stderr, b.stderr)
			}
		})
	}
	// gpusliced itself under the node-wide mode: it starts, serves and
	// audits as usual.
	t.Run("gpusliced serving", func(t *testing.T) {
		d2 := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraEnv: []string{"LD_PRELOAD=" + probe.Lib(t)}})
		s, err := d2.Client().CreateSession(ctx(t), client.SessionRequest{ID: "nw", UID: 0, QuotaBytes: 256 * MiB})
		if err != nil {
			t.Fatal(err)
		}
		if s.GPUs[0].PhysicalBytes != 80*GiB {
			t.Errorf("gpusliced under the library sees %d bytes on its GPU, want the physical 80 GiB", s.GPUs[0].PhysicalBytes)
		}
		p := startCmd(t, probeCmd(t, "dev:0", "alloc:200M", "alloc:200M"), jobEnv(t, d2, "nw"))
		p.Wait()
		if rc := p.Result().Find(t, "alloc", 1).Get("rc"); rc != "2" {
			t.Errorf("quota not applied by a daemon running under the library: rc=%s", rc)
		}
	})
}

type ran struct {
	code           int
	stdout, stderr string
}

func run(argv []string, env []string) ran {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		e.WriteString(err.Error())
	}
	return ran{code: code, stdout: varying.ReplaceAllString(o.String(), "$1=*"), stderr: varying.ReplaceAllString(e.String(), "$1=*")}
}

// varying are the figures that differ between any two runs (pids,
// addresses): masked before comparing.
var varying = regexp.MustCompile(`\b(pid|ptr)=[0-9a-fx]+`)
