// Package compute proves the GPU time share end to end: the real gpusliced,
// the interceptor's launch gate and fakecuda's time-sliced GPU
// (docs/fakecuda-apis.md, "GPU time"; docs/compute-share.md). Jobs
// launch kernels back to back; what each got is what NVML reports per
// process over a window, as an admin would read it. Shares are measured
// in the model's GPU time, so they do not depend on how busy the CPUs are.
package compute

import (
	"bufio"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// window is what a share is measured over: NVML samples for 10 s of GPU time.
const window = "10"

// startDaemon starts gpusliced on one fake 80 GiB GPU; gpuEnv are settings
// of that GPU (testenv.DaemonOptions.GPUEnv).
func startDaemon(t *testing.T, gpuEnv ...string) *testenv.Daemon {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB", GPUEnv: gpuEnv})
	t.Cleanup(func() { os.Remove("/dev/shm/fakecuda-" + d.State + "@timeline") })
	return d
}

// session makes a session of quota bytes with the given share.
func session(t *testing.T, d *testenv.Daemon, id string, quota uint64, c *api.Compute) {
	t.Helper()
	_, err := d.Client().CreateSession(context.Background(), client.SessionRequest{ID: id, UID: 0, QuotaBytes: quota, Compute: c})
	if err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
}

func percent(p, max int) *api.Compute {
	return &api.Compute{Mode: api.ComputePercent, Percent: p, MaxPercent: max}
}

func program(t *testing.T, name string) string {
	p := filepath.Join(testenv.BuildDir(t), "tests", "fakecuda", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not built (make fakecuda): %v", name, err)
	}
	return p
}

// job is a process of a session launching 2 ms kernels, 32 queued ahead
// (64 ms: a stall of the job on a loaded CPU does not empty its queue).
// A job may also stand for several processes of one session (group):
// what they got together is measured.
type job struct {
	cmd  *exec.Cmd
	pid  int
	more []*job // group: the processes it stands for
}

// group stands for the processes js of one session.
func group(js ...*job) *job { return &job{pid: -1, more: js} }

// busyOf is the GPU time j's processes got in busy.
func (j *job) busyOf(busy map[int]float64) float64 {
	if j.more == nil {
		return busy[j.pid]
	}
	var ms float64
	for _, p := range j.more {
		ms += p.busyOf(busy)
	}
	return ms
}

func launch(t *testing.T, d *testenv.Daemon, id string, args ...string) *job {
	t.Helper()
	return launchAs(t, d, nil, id, args...)
}

// launchAs is launch as another user (nil: the test's own).
func launchAs(t *testing.T, d *testenv.Daemon, u *testenv.Account, id string, args ...string) *job {
	t.Helper()
	return start(t, d, how{user: u, session: id}, args...)
}

// how a job's process is started: as whom, in which cgroup (a directory
// fd, 0: the test's), with which environment changes (env replaces or
// adds; unset removes).
type how struct {
	user    *testenv.Account
	session string
	cgroup  int
	env     []string
	unset   []string
}

func start(t *testing.T, d *testenv.Daemon, h how, args ...string) *job {
	t.Helper()
	id := h.session
	if len(args) == 0 {
		args = []string{"2", "32"}
	}
	cmd := exec.Command(program(t, "fc_launcher"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if u := h.user; u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID}
	}
	if h.cgroup > 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, h.cgroup
	}
	env := append(d.Env(), "LD_PRELOAD="+filepath.Join(testenv.BuildDir(t), "lib", "libgpuslice.so"),
		"GPUSLICE_SESSION="+id)
	env = append(env, h.env...)
	for _, k := range h.unset {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &job{cmd: cmd, pid: cmd.Process.Pid}
	t.Cleanup(j.kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event=ready") {
			go func() {
				for sc.Scan() {
				}
			}()
			return j
		}
		t.Logf("%s: %s", id, sc.Text())
	}
	t.Fatalf("job of session %s ended before launching", id)
	return nil
}

func (j *job) kill() {
	if j.cmd.ProcessState == nil {
		j.cmd.Process.Signal(syscall.SIGKILL)
		j.cmd.Wait()
	}
}

// gpuWatch is what NVML reported of GPU 0 over a window (fc_utilwatch).
type gpuWatch struct {
	busy    map[int]float64 // ms of GPU time per pid
	win     float64         // the window's length in ms
	samples int             // distinct sample periods seen
}

// watchGPU watches GPU 0 through NVML for secs seconds.
func watchGPU(t *testing.T, d *testenv.Daemon, secs string) gpuWatch {
	t.Helper()
	cmd := exec.Command(program(t, "fc_utilwatch"), secs)
	cmd.Env = d.Env()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fc_utilwatch: %v", err)
	}
	w := gpuWatch{busy: map[int]float64{}}
	for _, l := range strings.Split(string(out), "\n") {
		kv := map[string]string{}
		for _, f := range strings.Fields(l) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		ms, _ := strconv.ParseFloat(kv["ms"], 64)
		switch kv["event"] {
		case "busy":
			pid, _ := strconv.Atoi(kv["pid"])
			w.busy[pid] = ms
		case "window":
			w.win = ms
			w.samples, _ = strconv.Atoi(kv["samples"])
		}
	}
	return w
}

// measure is what NVML reports of GPU 0 over secs seconds: ms per pid and
// the window's length in ms.
func measure(t *testing.T, d *testenv.Daemon, secs string) (map[int]float64, float64) {
	t.Helper()
	w := watchGPU(t, d, secs)
	if w.win <= 0 {
		t.Fatalf("NVML gave no samples over %s s: the GPU sat idle while jobs were to launch", secs)
	}
	return w.busy, w.win
}

// shares are the jobs' fractions of the GPU's busy time over the window.
func shares(busy map[int]float64, jobs ...*job) []float64 {
	var total float64
	for _, ms := range busy {
		total += ms
	}
	out := make([]float64, len(jobs))
	for i, j := range jobs {
		if total > 0 {
			out[i] = 100 * j.busyOf(busy) / total
		}
	}
	return out
}

// expectShares measures the jobs' shares of the GPU over the window and
// expects each within 5 points of want (what says what is measured).
func expectShares(t *testing.T, d *testenv.Daemon, what string, want []float64, jobs ...*job) {
	t.Helper()
	busy, win := measure(t, d, window)
	checkShares(t, what, want, busy, win, jobs...)
}

// checkShares expects the jobs' shares of busy within 5 points of want.
func checkShares(t *testing.T, what string, want []float64, busy map[int]float64, win float64, jobs ...*job) {
	t.Helper()
	got := shares(busy, jobs...)
	t.Logf("%s: measured shares %.1f (window %.0f ms)", what, got, win)
	for i, w := range want {
		if math.Abs(got[i]-w) > 5 {
			t.Errorf("%s: the sessions got %.1f%% of the GPU, want %.0f within 5 points", what, got, want)
			return
		}
	}
}

// settle lets the controller see every job before the window opens.
func settle() { time.Sleep(time.Second) }
