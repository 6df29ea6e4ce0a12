package main

// Figures of the GPU time share (issue 28): what the launch gate adds to a
// launch when the GPU is not contended, and how close measured shares come
// to the weights (the 25/75 and 20/30/50 cases of tests/compute, measured
// the same way: NVML's per-process samples over 10 s of fakecuda's GPU).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
)

func computeBench(o options, d *daemon, r *results) {
	if added, control, err := gateBench(o, d); err != nil {
		r.fail("launch_gate_added_ns", err)
	} else {
		r.set("launch_gate_added_ns", added)
		r.set("launch_gate_added_ns_control", control)
	}
	for _, w := range [][]int{{25, 75}, {20, 30, 50}} {
		key := fmt.Sprintf("compute_share_error_points_%d", len(w))
		if e, got, err := shareBench(o, d, w); err != nil {
			r.fail(key, err)
		} else {
			r.set(key, e)
			r.notes[key] = fmt.Sprintf("weights %v measured %.1f", w, got)
		}
	}
}

func (d *daemon) fakeEnv(o options) []string {
	return append(baseEnv(), "LD_LIBRARY_PATH="+filepath.Join(o.build, "lib"),
		"FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state)
}

func (d *daemon) sessionEnv(o options, id string, c *api.Compute) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 8 << 30,
		Compute: c}); err != nil {
		return nil, err
	}
	return append(d.fakeEnv(o), "LD_PRELOAD="+filepath.Join(o.build, "lib", "libgpuslice.so"),
		"GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+d.ipcSock), nil
}

// gateBench: fc_launchbench's paired batches (the interceptor's
// cuLaunchKernel vs the driver's, one process) in a session that has a
// share on an uncontended GPU; control: the same program without the
// interceptor (both batches reach the driver).
func gateBench(o options, d *daemon) (added, control float64, err error) {
	env, err := d.sessionEnv(o, "bench-gate", &api.Compute{Mode: api.ComputePercent, Percent: 50})
	if err != nil {
		return 0, 0, err
	}
	bin := filepath.Join(o.build, "tests", "fakecuda", "fc_launchbench")
	var res struct {
		Added float64 `json:"ns_added_paired"`
	}
	out, err := runProgram(env, bin, "400", "2000")
	if err == nil {
		err = json.Unmarshal(out, &res)
	}
	if err != nil {
		return 0, 0, err
	}
	added = res.Added
	if out, err = runProgram(d.fakeEnv(o), bin, "400", "2000"); err == nil {
		err = json.Unmarshal(out, &res)
	}
	return added, res.Added, err
}

// shareBench runs one job per weight launching 2 ms kernels back to back
// and returns the largest distance, in points, between a weight and the
// share NVML measured over 10 s.
func shareBench(o options, d *daemon, weights []int) (float64, []float64, error) {
	var pids []int
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGKILL)
			c.Wait()
		}
	}()
	for i, w := range weights {
		id := fmt.Sprintf("bench-share-%d-%d", len(weights), i)
		env, err := d.sessionEnv(o, id, &api.Compute{Mode: api.ComputePercent, Percent: w})
		if err != nil {
			return 0, nil, err
		}
		cmd := exec.Command(filepath.Join(o.build, "tests", "fakecuda", "fc_launcher"), "2", "32")
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, nil, err
		}
		if err := cmd.Start(); err != nil {
			return 0, nil, err
		}
		cmds = append(cmds, cmd)
		sc := bufio.NewScanner(out)
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "event=ready") {
			return 0, nil, fmt.Errorf("fc_launcher of %s did not start: %q", id, sc.Text())
		}
		go func() {
			for sc.Scan() {
			}
		}()
		pids = append(pids, cmd.Process.Pid)
	}
	time.Sleep(time.Second)
	out, err := runProgram(d.fakeEnv(o), filepath.Join(o.build, "tests", "fakecuda", "fc_utilwatch"), "10")
	if err != nil {
		return 0, nil, err
	}
	busy := map[int]float64{}
	var total float64
	for _, l := range strings.Split(string(out), "\n") {
		var pid int
		var ms float64
		if n, _ := fmt.Sscanf(l, "event=busy pid=%d ms=%g", &pid, &ms); n == 2 {
			busy[pid] = ms
			total += ms
		}
	}
	if total == 0 {
		return 0, nil, fmt.Errorf("NVML reported no GPU time")
	}
	worst := 0.0
	got := make([]float64, len(weights))
	for i, w := range weights {
		got[i], _ = strconv.ParseFloat(fmt.Sprintf("%.1f", 100*busy[pids[i]]/total), 64)
		worst = math.Max(worst, math.Abs(100*busy[pids[i]]/total-float64(w)))
	}
	return worst, got, nil
}
