package containers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// containerStateDir is where an Apptainer container sees the node's
// /dev/shm (fakecuda's device state).
const containerStateDir = "/var/lib/fakecuda-state"

// How a node gets the interceptor into Apptainer containers: one of the
// two ways docs/containers.md gives (Apptainer refuses the two at once).
type bindMode string

const (
	// byConf: etc/apptainer/gpuslice.conf appended to apptainer.conf.
	byConf bindMode = "apptainer.conf"
	// byTaskProlog: etc/apptainer/taskprolog.sh as Slurm's TaskProlog,
	// whose exports are in each task's environment.
	byTaskProlog bindMode = "TaskProlog"
)

// apptainer is one node's Apptainer: the build's apptainer.conf, with
// gpuslice's snippet appended (byConf) or with the TaskProlog's exports in
// the job's environment (byTaskProlog), their packaged paths
// (/usr/lib/gpuslice, /run/gpuslice, the ld.so.preload file) changed to
// the test's library and daemon.
type apptainer struct {
	bin     string
	conf    string
	lib     string
	exports []string // the TaskProlog's, NAME=VALUE
	daemon  *testenv.Daemon
}

func newApptainer(t *testing.T, d *testenv.Daemon, mode bindMode) *apptainer {
	t.Helper()
	dir := runtimeDir(t, "apptainer")
	a := &apptainer{bin: filepath.Join(dir, "bin", "apptainer"), lib: stagedLib(t), daemon: d}
	base, err := os.ReadFile(filepath.Join(dir, "etc", "apptainer", "apptainer.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// Root on the build machines lacks CAP_SYS_RESOURCE, and Apptainer
	// refuses to run root's container with every capability ("full", its
	// default) when it cannot have them: root's container keeps those of
	// capability.json (none). The job's program needs none.
	conf := strings.Replace(string(base), "root default capabilities = full", "root default capabilities = file", 1)
	if conf == string(base) {
		t.Fatal("apptainer.conf has no 'root default capabilities = full' line to change")
	}
	preload := filepath.Join(t.TempDir(), "ld.so.preload")
	writeFile(t, preload, a.lib+"\n", 0o644)
	// The library's directory at the same path inside (the host's
	// LD_PRELOAD names it); the daemon's directory where the packaged
	// gpusliced has it, /run/gpuslice (the job's environment leaves
	// GPUSLICE_IPC_SOCK unset: the interceptor's default, the plugin's
	// default socket=).
	run := filepath.Dir(d.IPCSock)
	lib := filepath.Dir(a.lib)
	repo := testenv.RepoRoot(t)
	switch mode {
	case byConf:
		snippet, err := os.ReadFile(filepath.Join(repo, "etc", "apptainer", "gpuslice.conf"))
		if err != nil {
			t.Fatal(err)
		}
		conf += "\n" + strings.NewReplacer("/usr/share/gpuslice/apptainer/ld.so.preload", preload,
			"/usr/lib/gpuslice", lib, "/run/gpuslice", run+":/run/gpuslice").Replace(string(snippet))
	case byTaskProlog:
		script, err := os.ReadFile(filepath.Join(repo, "etc", "apptainer", "taskprolog.sh"))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("/usr/share/gpuslice/apptainer/ld.so.preload", preload,
			"/usr/lib/gpuslice", lib, "/run/gpuslice:/run/gpuslice", run+":/run/gpuslice",
			"/run/gpuslice/ipc.sock", d.IPCSock).Replace(string(script))
		// Run as slurmd runs a TaskProlog: its stdout's "export" lines
		// go into the task's environment.
		cmd := exec.Command("/bin/sh", "-c", s)
		cmd.Env = testenv.BaseEnv()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("taskprolog.sh: %v", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			kv, ok := strings.CutPrefix(l, "export ")
			if !ok {
				t.Fatalf("taskprolog.sh printed %q, not an export", l)
			}
			a.exports = append(a.exports, kv)
		}
		if len(a.exports) != 2 {
			t.Fatalf("taskprolog.sh exported %v, want APPTAINER_BIND and SINGULARITY_BIND", a.exports)
		}
	}
	a.conf = filepath.Join(t.TempDir(), "apptainer.conf")
	writeFile(t, a.conf, conf, 0o644)
	return a
}

// exec runs `apptainer exec FLAGS IMAGE argv...` in job's step. fakecuda
// (the driver) comes in as --nv brings NVIDIA's: its libraries bound into
// the image's library directory, its device (the state file) bound into
// /dev/shm, its settings in the container's environment.
func (a *apptainer) exec(t *testing.T, job string, flags []string, argv ...string) *probe.Proc {
	t.Helper()
	return a.execEnv(t, job, nil, flags, argv...)
}

// execEnv is exec with the names in drop removed from the job's
// environment first (what a user who unsets them runs).
func (a *apptainer) execEnv(t *testing.T, job string, drop []string, flags []string, argv ...string) *probe.Proc {
	t.Helper()
	args := []string{a.bin, "--config", a.conf, "--quiet", "exec"}
	args = append(args, flags...)
	for _, lib := range fakecudaLibs(t) {
		args = append(args, "--bind", lib+":/usr/lib/x86_64-linux-gnu/"+filepath.Base(lib))
	}
	d := a.daemon
	// The node's /dev/shm, where fakecuda keeps its device state, bound
	// outside /dev (--contain gives the container a /dev of its own, into
	// which nothing but real device nodes can be bound) and named with
	// FAKECUDA_STATE_DIR.
	args = append(args, "--bind", "/dev/shm:"+containerStateDir, "--env", "FAKECUDA_STATE_DIR="+containerStateDir,
		"--env", "FAKECUDA_DEVICES="+d.Devices, "--env", "FAKECUDA_STATE="+d.State, "--env", "FAKECUDA_CTX_BYTES=0")
	args = append(args, image(t))
	drop = append(drop, "GPUSLICE_IPC_SOCK")
	var env []string
	for _, kv := range append(jobEnv(d, a.lib, job), a.exports...) {
		name, _, _ := strings.Cut(kv, "=")
		dropped := false
		for _, n := range drop {
			dropped = dropped || n == name
		}
		if !dropped {
			env = append(env, kv)
		}
	}
	return stepd(t, job, env, append(args, argv...)...)
}

// A job's program run with apptainer exec of a Debian 11 image (glibc
// 2.31) is held to the job's quota with each way of running it that the
// node's configuration covers: the interceptor is there through the
// host's LD_PRELOAD or, where the environment is dropped, the bound
// ld.so.preload; queries show the quota, allocations past it fail with
// CUDA_ERROR_OUT_OF_MEMORY, and at job end the memory returns and the
// session is released. apptainer.conf's bind paths do not cover --contain
// (TestApptainerContainWithConfAudited); the TaskProlog's binds do.
func TestApptainerJobHeldToQuota(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		mode  bindMode
		flags [][]string
	}{
		{byConf, [][]string{nil, {"--nv"}, {"--cleanenv"}, {"--nv", "--cleanenv"}}},
		{byTaskProlog, [][]string{nil, {"--nv"}, {"--cleanenv"}, {"--contain"}, {"--nv", "--cleanenv", "--contain"}}},
	} {
		a := newApptainer(t, d, c.mode)
		for _, flags := range c.flags {
			t.Run(string(c.mode)+": "+strings.Join(append([]string{"exec"}, flags...), " "), func(t *testing.T) {
				job := newJob(t, d, 256*MiB)
				p := a.exec(t, job, flags, probeInImage, "pid", "dev:0", "meminfo", "nvml", "alloc:200M", "alloc:100M", "pause")
				p.Expect("paused")
				r := p.Result()
				checkHeld(t, r, 256*MiB)
				checkOldGlibc(t, r.Find(t, "pid", 0).Get("pid"), filepath.Base(a.lib))
				if u := used(t, d, job); u != 200*MiB {
					t.Errorf("session holds %d while the container holds 200 MiB", u)
				}
				endJob(t, d, job, p, 200*MiB)
			})
		}
	}
}

// With only apptainer.conf's bind paths, `apptainer exec --contain` runs
// without the interceptor (Apptainer skips every 'bind path' under
// --contain): the job's program sees the whole GPU, and what holds is the
// audit, which stops it once it holds more than the quota.
func TestApptainerContainWithConfAudited(t *testing.T) {
	d := daemon(t)
	a := newApptainer(t, d, byConf)
	job := newJob(t, d, 256*MiB)
	good := a.exec(t, job, nil, probeInImage, "dev:0", "alloc:64M", "pause")
	good.Expect("paused")
	p := a.exec(t, job, []string{"--contain"}, probeInImage, "dev:0", "meminfo", "alloc:512M", "pause")
	p.Expect("paused")
	if m := p.Result().Find(t, "meminfo", 0); m.Uint(t, "total") == 256*MiB {
		t.Fatalf("--contain kept apptainer.conf's binds (docs/containers.md says it does not): %s", m.Line)
	}
	expectStopped(t, d, p, good)
	endJob(t, d, job, good, 576*MiB)
}

// A process in an Apptainer container that gets rid of the interceptor
// (the user drops the system's bind paths, or the TaskProlog's binds, so
// the library is not there) and takes more than the job's quota is stopped
// by the audit; the job's process within the quota keeps running.
func TestApptainerBypassStopped(t *testing.T) {
	cases := []struct {
		name  string
		mode  bindMode
		drop  []string
		flags []string
	}{
		{name: "no-mount bind-paths", mode: byConf, flags: []string{"--no-mount", "bind-paths"}},
		{name: "no-mount bind-paths and cleanenv", mode: byConf, flags: []string{"--no-mount", "bind-paths", "--cleanenv"}},
		{name: "TaskProlog binds unset", mode: byTaskProlog, drop: []string{"APPTAINER_BIND", "SINGULARITY_BIND"},
			flags: []string{"--contain", "--cleanenv"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := daemon(t)
			a := newApptainer(t, d, c.mode)
			job := newJob(t, d, 256*MiB)
			good := a.exec(t, job, nil, probeInImage, "dev:0", "alloc:64M", "pause")
			good.Expect("paused")
			bad := a.execEnv(t, job, c.drop, c.flags, probeInImage, "dev:0", "meminfo", "alloc:512M", "pause")
			checkBypassStopped(t, d, job, good, bad)
		})
	}
}
