package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/daemon/audit"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// jobEnv is the environment of a process of session id with the
// interceptor preloaded.
func (d *daemon) jobEnv(o options, id string) []string {
	return append(d.bareEnv(o), "LD_PRELOAD="+filepath.Join(o.build, "lib", "libgpuslice.so"),
		"GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+d.ipcSock)
}

// holder starts target_app holding count x step in session id.
func holder(o options, env []string, step string, count int) (*exec.Cmd, error) {
	cmd := exec.Command(filepath.Join(o.build, "examples", "target_app"), "--api", "driver",
		"--step", step, "--count", strconv.Itoa(count), "--hold", "600")
	cmd.Env = env
	return cmd, cmd.Start()
}

// auditActionBench times an overrun to the audit's action: a process holds
// 512 MiB within a 1 GiB quota; the quota is lowered to 256 MiB (the
// overrun starts); the time until the process has been killed is one
// sample. The daemon runs the default audit_interval.
func auditActionBench(o options, d *daemon, n int) (p50, max float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("bench-audit-%d", i)
		if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
			return 0, 0, err
		}
		l, err := ledger.Open(filepath.Join(d.dir, "run", "ledgers"), id)
		if err != nil {
			return 0, 0, err
		}
		cmd, err := holder(o, d.jobEnv(o, id), "64MiB", 8)
		if err != nil {
			l.Close()
			return 0, 0, err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		for start := time.Now(); l.Used(0) < 512<<20; time.Sleep(time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				cmd.Process.Kill()
				<-done
				l.Close()
				return 0, 0, fmt.Errorf("target_app did not charge 512 MiB (used %d)", l.Used(0))
			}
		}
		l.Close()
		q := uint64(256 << 20)
		t0 := time.Now()
		if _, err := d.cl.PatchSession(ctx, id, client.PatchRequest{QuotaBytes: &q}); err != nil {
			cmd.Process.Kill()
			<-done
			return 0, 0, err
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			return 0, 0, fmt.Errorf("the audit did not act within 30 s")
		}
		el := float64(time.Since(t0).Nanoseconds()) / 1e6
		lat = append(lat, el)
		if el > max {
			max = el
		}
		waitDelete(ctx, d, id)
	}
	return percentile(lat, 50), max, nil
}

// waitDelete deletes session id once its processes are gone.
func waitDelete(ctx context.Context, d *daemon, id string) {
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
		if _, err := d.cl.DeleteSession(ctx, id); err == nil {
			return
		}
	}
}

// auditCPUBench measures the daemon's CPU time per second with procs
// processes holding GPU memory (each is listed by NVML and mapped to its
// session by every pass), over window, as percent of one core scaled to
// 1,000 processes (unscaled at the default of 1,000), and the same daemon's
// CPU with the session made and no process yet (idle). Idle work of the
// daemon (Go's scheduler, sweep, pidfds) is included, so the figure is an
// upper bound of the audit's own cost. The daemon is one of its own: 1,000
// contexts at fakecuda's per-context cost would not fit the GPU, so on its
// node a context costs nothing (as in the storm), with the interceptor's
// charges and the driver-memory walk unchanged.
func auditCPUBench(o options, procs int, window time.Duration) (pct, idle float64, err error) {
	d, err := startDaemon(o.build, "80GiB", true, "FAKECUDA_CTX_BYTES=0")
	if err != nil {
		return 0, 0, err
	}
	defer d.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const id = "bench-audit-cpu"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 64 << 30}); err != nil {
		return 0, 0, err
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		waitDelete(ctx, d, id)
	}()
	if idle, err = cpuPerSecond(d.cmd.Process.Pid, window); err != nil {
		return 0, 0, err
	}
	env := d.jobEnv(o, id)
	for i := 0; i < procs; i++ {
		c, err := holder(o, env, "1MiB", 1)
		if err != nil {
			return 0, 0, err
		}
		cmds = append(cmds, c)
	}
	// Wait until every process is attached and holds its memory.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		s, err := d.cl.GetSession(ctx, id)
		if err == nil && len(s.Processes) == procs && s.GPUs[0].UsedBytes >= uint64(procs)<<20 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return 0, 0, fmt.Errorf("%d processes did not all attach", procs)
		}
	}
	perSec, err := cpuPerSecond(d.cmd.Process.Pid, window)
	if err != nil {
		return 0, 0, err
	}
	return perSec * 1000 / float64(procs) * 100, idle * 100, nil
}

// cpuPerSecond is the CPU time pid runs per second of wall time over window.
func cpuPerSecond(pid int, window time.Duration) (float64, error) {
	c0, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	return (c1 - c0) / time.Since(t0).Seconds(), nil
}

// cpuSeconds is the CPU time pid's threads have run, in seconds: the sum
// of the first field of /proc/<pid>/task/*/schedstat (nanoseconds). The
// tick-based utime+stime of /proc/<pid>/stat counts in 10 ms steps: over
// a 10 s window with 200 processes one tick is 0.5 % of the scaled figure.
// (A thread that exits takes its time with it; the Go runtime keeps its
// threads.)
func cpuSeconds(pid int) (float64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var ns uint64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := bytes.Fields(b)
		if len(f) < 1 {
			continue
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, e.Name(), err)
		}
		ns += v
	}
	return float64(ns) / 1e9, nil
}

// auditDecideBench times the daemon's own share of one audit pass for
// 1,000 processes in 100 sessions (two reads combined, attributed,
// decided, summed), without the NVML read: microseconds per pass.
func auditDecideBench() float64 {
	const procs, sessions = 1000, 100
	a := make([]audit.Sample, procs)
	b := make([]audit.Sample, procs)
	q := audit.Quotas{}
	owner := map[uint32]string{}
	for i := range a {
		pid := uint32(100000 + i)
		a[i] = audit.Sample{PID: pid, GPU: i % 4, Bytes: uint64(i) << 20}
		b[i] = a[i]
		id := "job" + strconv.Itoa(i%sessions)
		owner[pid] = id
		q[id] = map[int]uint64{0: 8 << 30, 1: 8 << 30, 2: 8 << 30, 3: 8 << 30}
	}
	const rounds = 200
	t0 := time.Now()
	for r := 0; r < rounds; r++ {
		usage := make([]audit.Attributed, 0, procs)
		for _, s := range audit.Steady(a, b) {
			usage = append(usage, audit.Attributed{Sample: s, Session: owner[s.PID]})
		}
		audit.Decide(q, usage)
		audit.Sums(usage)
	}
	return float64(time.Since(t0).Microseconds()) / rounds
}

// shortBench times how long a job is refused memory its quota promised
// while a neighbour that bypasses the interceptor holds more than its own
// quota: a process of job J (a child of a stand-in slurmstepd, so that
// gpusliced attributes it to J) holds 78 GiB of the 80 GiB GPU without the
// interceptor, J's quota being 1 GiB; a process of another session asks
// for 3 GiB of its 4 GiB quota and the driver refuses it. Its interceptor
// tells gpusliced (SHORT), which audits at once. One sample: from the
// start of the refused process (so exec and attach are counted too) to the
// moment the bypassing process is gone and the memory is back.
func shortBench(o options, d *daemon, n int) (p50, p99 float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "gsbench-stepd")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	stepd := filepath.Join(dir, "slurmstepd")
	bash, err := os.ReadFile("/bin/bash")
	if err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(stepd, bash, 0o755); err != nil {
		return 0, 0, err
	}
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		job := strconv.Itoa(7100 + i)
		if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: job, UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
			return 0, 0, err
		}
		nb := "bench-short-" + job
		if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: nb, UID: uint32(os.Getuid()), QuotaBytes: 4 << 30}); err != nil {
			return 0, 0, err
		}
		app := filepath.Join(o.build, "examples", "target_app")
		bad := exec.Command(stepd, "-c", `"$@" & wait $!`, "bash", app, "--api", "driver", "--step", "1GiB", "--count", "78", "--hold", "600")
		bad.Args[0] = "slurmstepd: [" + job + ".0]"
		bad.Env = append(baseEnv(), "FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state, "LD_LIBRARY_PATH="+filepath.Join(o.build, "lib"))
		var out bytes.Buffer
		bad.Stdout = &out
		if err := bad.Start(); err != nil {
			return 0, 0, err
		}
		done := make(chan struct{})
		go func() { bad.Wait(); close(done) }()
		for start := time.Now(); bytes.Count(out.Bytes(), []byte("status=allowed")) < 78; time.Sleep(time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				bad.Process.Kill()
				<-done
				return 0, 0, fmt.Errorf("the bypassing process did not take 78 GiB:\n%s", out.String())
			}
		}
		t0 := time.Now()
		ref := exec.Command(app, "--api", "driver", "--step", "3GiB", "--count", "1")
		ref.Env = d.jobEnv(o, nb)
		refOut, _ := ref.Output()
		if !bytes.Contains(refOut, []byte("status=denied")) {
			bad.Process.Kill()
			<-done
			return 0, 0, fmt.Errorf("the neighbour's 3 GiB was not refused by the driver:\n%s", refOut)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			bad.Process.Kill()
			<-done
			return 0, 0, fmt.Errorf("the bypassing process was not stopped within 30 s")
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e6)
		waitDelete(ctx, d, job)
		waitDelete(ctx, d, nb)
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}
