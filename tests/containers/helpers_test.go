// Package containers runs jobs whose programs live in container images:
// enroot (what pyxis starts under Slurm) and Apptainer, built by make
// containers from their public sources, each running a Debian 11 image
// (glibc 2.31) made from a local root as squashfs. A real gpusliced,
// fakecuda and the interceptor; a job is a stand-in for Slurm's
// slurmstepd (as in tests/security) that starts the container runtime.
//
// What gets the interceptor into a container is what the packages ship:
// etc/enroot/50-gpuslice.sh (the enroot hook) and etc/apptainer/gpuslice.conf
// (Apptainer's bind paths), with their host paths pointed at the test's
// daemon and library. The GPU's stand-in reaches the container the way
// nvidia-container-cli (enroot's 98-nvidia hook) or --nv bring the real
// driver: fakecuda's libcuda.so.1 and libnvidia-ml.so.1 bound into the
// image's library directory, and its "device" (the node-wide state file in
// /dev/shm) reachable inside: enroot binds the node's /dev/shm itself;
// Apptainer's --contain makes a /dev of its own, so the node's /dev/shm is
// bound elsewhere and named with FAKECUDA_STATE_DIR.
package containers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

const (
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30

	// cudaOOM is CUDA_ERROR_OUT_OF_MEMORY.
	cudaOOM = "2"
	// probeInImage is the suite's CUDA program in the image (built for
	// glibc 2.31 by make container-image).
	probeInImage = "/usr/local/bin/gs_probe"
)

var seq atomic.Int64

// TestMain removes what the tests shared once they are done (root's
// enroot container root).
func TestMain(m *testing.M) {
	code := m.Run()
	removeShared()
	os.Exit(code)
}

// ctx is a call's context (testenv.Context).
var ctx = testenv.Context

// needRoot: container runtimes, mounts and the slurmstepd stand-in.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("tests/containers must run as root (CI does): container runtimes and mounts")
	}
}

// runtimeDir is build/containers/NAME; the test skips with the build's
// reason when the runtime could not be built here (no source reachable).
func runtimeDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(testenv.BuildDir(t), "containers", name)
	if b, err := os.ReadFile(filepath.Join(dir, "UNAVAILABLE")); err == nil {
		t.Skipf("%s was not built: %s", name, strings.TrimSpace(string(b)))
	}
	testenv.Artifact(t, filepath.Join("containers", name, "COMMIT"))
	return dir
}

// image is the Debian 11 squashfs image; the test skips when the Debian
// archive was unreachable when it was to be made.
func image(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.BuildDir(t), "containers", "images")
	if b, err := os.ReadFile(filepath.Join(dir, "UNREACHABLE")); err == nil {
		t.Skipf("no container image: %s", strings.TrimSpace(string(b)))
	}
	return testenv.Artifact(t, filepath.Join("containers", "images", "bullseye.sqsh"))
}

// daemon starts gpusliced with the shipped audit interval (500 ms), so
// that the time a bypassing process lives is the one a node would see.
func daemon(t *testing.T) *testenv.Daemon {
	t.Helper()
	needRoot(t)
	return testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, RecoveryInterval: 100 * time.Millisecond})
}

// newJob creates a session (a job's, as the Prolog would) for root with
// quota on every GPU and returns its id.
func newJob(t *testing.T, d *testenv.Daemon, quota uint64) string {
	t.Helper()
	return newJobOf(t, d, 0, quota)
}

// newJobOf is newJob for the user uid.
func newJobOf(t *testing.T, d *testenv.Daemon, uid uint32, quota uint64) string {
	t.Helper()
	id := fmt.Sprintf("%d%03d", os.Getpid()%100000, seq.Add(1))
	if _, err := d.Client().CreateSession(ctx(t), client.SessionRequest{ID: id, UID: uid, QuotaBytes: quota}); err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
	return id
}

// used is what the daemon counts for session id on its first GPU.
func used(t *testing.T, d *testenv.Daemon, id string) uint64 {
	t.Helper()
	s, err := d.Client().GetSession(ctx(t), id)
	if err != nil {
		t.Fatalf("get session %s: %v", id, err)
	}
	return s.GPUs[0].UsedBytes
}

// stagedLib copies the interceptor into a directory of its own, as the
// packages install it (/usr/lib/gpuslice/libgpuslice.so): the container
// configurations bind that directory, not all of build/lib (which holds
// fakecuda too). It is under /run, which no runtime shows inside by
// itself, as none shows /usr/lib/gpuslice: under /tmp (Apptainer binds
// the host's) or build/ (a clone may be under /tmp), a container would see
// it without gpuslice's binds.
func stagedLib(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "gsct-lib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	lib := filepath.Join(dir, "libgpuslice.so")
	probe.CopyFile(t, probe.Lib(t), lib, 0o644)
	return lib
}

// jobEnv is a job step's environment as the SPANK plugin leaves it: the
// interceptor preloaded, the session and the socket named.
func jobEnv(d *testenv.Daemon, lib, job string) []string {
	return append(d.Env(), "LD_PRELOAD="+lib, "GPUSLICE_SESSION="+job)
}

// stepd starts argv under a stand-in for slurmstepd of job: a root
// process named slurmstepd whose title is "slurmstepd: [<job>.0]" (what
// gpusliced recognises a job's step by), running argv as its child.
func stepd(t *testing.T, job string, env []string, argv ...string) *probe.Proc {
	t.Helper()
	return probe.StartStepd(t, job, env, argv...)
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// fakecudaLibs are the driver's libraries a container gets, as
// nvidia-container-cli mounts the real ones.
func fakecudaLibs(t *testing.T) []string {
	t.Helper()
	return []string{testenv.Artifact(t, "lib/libcuda.so.1"), testenv.Artifact(t, "lib/libnvidia-ml.so.1")}
}

// checkHeld checks what a probe that ran "dev:0 meminfo nvml alloc:A
// alloc:B" in a session of quota q printed: both queries show q, the
// first allocation (within q) succeeded, the second (past it) failed with
// CUDA_ERROR_OUT_OF_MEMORY.
func checkHeld(t *testing.T, r probe.Result, q uint64) {
	t.Helper()
	if m := r.Find(t, "meminfo", 0); m.Uint(t, "total") != q || m.Uint(t, "free") != q {
		t.Errorf("cuMemGetInfo in the container: %s; want total=free=%d", m.Line, q)
	}
	if n := r.Find(t, "nvmldev", 0); n.Uint(t, "total1") != q || n.Uint(t, "total2") != q {
		t.Errorf("NVML in the container: %s; want total %d", n.Line, q)
	}
	if a := r.Find(t, "alloc", 0); a.Get("rc") != "0" {
		t.Errorf("allocation within the quota: %s", a.Line)
	}
	if a := r.Find(t, "alloc", 1); a.Get("rc") != cudaOOM {
		t.Errorf("allocation past the quota: %s; want rc=%s (CUDA_ERROR_OUT_OF_MEMORY)", a.Line, cudaOOM)
	}
}

// checkOldGlibc checks that the process pid runs on the image's glibc 2.31
// with the interceptor loaded (its memory map, read from the host).
func checkOldGlibc(t *testing.T, pid string, lib string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		t.Fatalf("maps of the container's process: %v", err)
	}
	maps := string(b)
	if !strings.Contains(maps, "libc-2.31.so") {
		t.Errorf("the container's process does not run on glibc 2.31:\n%s", maps)
	}
	if lib != "" && !strings.Contains(maps, lib) {
		t.Errorf("the container's process has no %s loaded", lib)
	}
}

// endJob kills a job's step (its process group), as Slurm does when the
// job ends, and checks that the session gets its memory back and is
// released with a report whose peak is peak.
func endJob(t *testing.T, d *testenv.Daemon, job string, p *probe.Proc, peak uint64) *client.Report {
	t.Helper()
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.Done()
	probe.Eventually(t, 20*time.Second, "the container's memory returned to the session", func() (bool, string) {
		u := used(t, d, job)
		return u == 0, fmt.Sprintf("used %d", u)
	})
	rep, err := d.Client().DeleteSession(ctx(t), job)
	if err != nil {
		t.Fatalf("release the session at job end: %v", err)
	}
	if rep.GPUs[0].PeakBytes != peak {
		t.Errorf("report peak %d, want %d", rep.GPUs[0].PeakBytes, peak)
	}
	if _, err := d.Client().GetSession(ctx(t), job); err == nil {
		t.Errorf("session %s still there after release", job)
	}
	return rep
}

// expectStopped waits for a bypassing process (one that printed "paused"
// holding memory past the quota) to be stopped by the audit; the time from
// its allocation to its death is logged. good, a process of the same job
// within the quota, must still run.
func expectStopped(t *testing.T, d *testenv.Daemon, bad, good *probe.Proc) {
	t.Helper()
	held := time.Now()
	select {
	case <-bad.Done():
		t.Logf("bypassing process stopped %v after it held the memory", time.Since(held).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("a container process over its job's quota without the interceptor was not stopped\n%s\n%s", bad.Output(), d.Log())
	}
	// gpusliced writes its line after the kill: the process can be seen
	// gone first.
	probe.Eventually(t, 5*time.Second, "the audit's line in the daemon's log", func() (bool, string) {
		return strings.Contains(d.Log(), "audit: session over its quota"), "not there"
	})
	select {
	case <-good.Done():
		t.Fatalf("the job's process within its quota was stopped too:\n%s", good.Output())
	default:
	}
}

// checkBypassStopped follows a job (quota 256 MiB) whose good process holds
// 64 MiB and whose bad one ran "meminfo alloc:512M pause" without the
// interceptor: the bad one really ran without it (it saw the whole GPU and
// got 512 MiB), the audit stops it while the good one runs on, the session
// keeps the good one's 64 MiB, and the report's peak is what the driver
// showed the job holding (both processes) and counts the audit's kill.
func checkBypassStopped(t *testing.T, d *testenv.Daemon, job string, good, bad *probe.Proc) {
	t.Helper()
	bad.Expect("paused")
	r := bad.Result()
	if m := r.Find(t, "meminfo", 0); m.Uint(t, "total") == 256*MiB {
		t.Fatalf("the bypassing process still had the interceptor: %s", m.Line)
	}
	if a := r.Find(t, "alloc", 0); a.Get("rc") != "0" {
		t.Fatalf("the bypassing allocation failed: %s", a.Line)
	}
	expectStopped(t, d, bad, good)
	if u := used(t, d, job); u != 64*MiB {
		t.Errorf("session holds %d after the audit, want the good process's 64 MiB", u)
	}
	rep := endJob(t, d, job, good, 576*MiB)
	if rep.AuditKilled < 1 {
		t.Errorf("the report does not count the audit's kill: %+v", rep)
	}
}
