package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// What a process pays: target_app is started (fork+exec) and the clock
// stops when it prints its first allocation (stdout is line-buffered), with
// the interceptor preloaded (it attaches at its first CUDA call) and
// without, in interleaved pairs.

// firstAlloc starts target_app (one 1 MiB allocation, then holds for hold
// seconds) and returns the time from just before exec to its first
// allocation, and the running command (the caller waits for it).
func firstAlloc(o options, env []string, hold string) (time.Duration, *exec.Cmd, error) {
	cmd := exec.Command(filepath.Join(o.build, "examples", "target_app"), "--api", "driver",
		"--step", "1MiB", "--count", "1", "--hold", hold)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	sc := bufio.NewScanner(out)
	var last string
	for sc.Scan() {
		line := sc.Text()
		last = line
		if strings.HasPrefix(line, "event=alloc index=1 ") {
			el := time.Since(t0)
			if !strings.Contains(line, "status=allowed") {
				return 0, cmd, fmt.Errorf("first allocation refused: %s", line)
			}
			go func() { // keep reading so that the process never blocks on a full pipe
				for sc.Scan() {
				}
			}()
			return el, cmd, nil
		}
	}
	cmd.Wait()
	return 0, nil, fmt.Errorf("target_app printed no allocation (%v): %s %s", cmd.ProcessState, last, strings.TrimSpace(stderr.String()))
}

// bareEnv is the environment of a process on d's fake node without the
// interceptor.
func (d *daemon) bareEnv(o options) []string {
	return append(append(baseEnv(), "FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state,
		"LD_LIBRARY_PATH="+filepath.Join(o.build, "lib")), d.node...)
}

// execBench returns the median over interleaved pairs of (with - without)
// exec-to-first-allocation, and the bare median, in ms. The processes
// with the interceptor share one session, as a job's ranks do; with
// fresh, each runs in a session of its own, created before the clock
// starts: the first process of a job (which measures what a context costs
// only when gpusliced has no figure; execMeasuring).
func execBench(o options, d *daemon, pairs int, fresh bool) (added, bare float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	session := func(id string) ([]string, error) {
		_, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 1 << 30})
		return d.jobEnv(o, id), err
	}
	shared, err := session("bench-exec")
	if err != nil {
		return 0, 0, err
	}
	defer d.cl.DeleteSession(ctx, "bench-exec")
	var diffs, bares []float64
	for i := 0; i < pairs+2; i++ {
		envs := [2][]string{d.bareEnv(o), shared}
		id := fmt.Sprintf("bench-exec-%d", i)
		if fresh {
			if envs[1], err = session(id); err != nil {
				return 0, 0, err
			}
		}
		var t [2]float64
		for k := 0; k < 2; k++ {
			j := (k + i) % 2 // alternate which goes first
			el, cmd, err := firstAlloc(o, envs[j], "0")
			if cmd != nil {
				cmd.Wait()
			}
			if err != nil {
				return 0, 0, err
			}
			t[j] = float64(el.Nanoseconds()) / 1e6
		}
		if fresh {
			d.cl.DeleteSession(ctx, id)
		}
		if i >= 2 { // warm-up pairs
			diffs = append(diffs, t[1]-t[0])
			bares = append(bares, t[0])
		}
	}
	return median(diffs), median(bares), nil
}

// execMeasuring is execBench's first-process figure on a daemon without
// the context probe: each session's first process measures what a context
// costs itself (NVML loaded and started, two process listings).
func execMeasuring(o options) (float64, error) {
	d, err := startDaemon(o.build, "80GiB", false)
	if err != nil {
		return 0, err
	}
	defer d.stop()
	added, _, err := execBench(o, d, o.execPairs, true)
	return added, err
}

// stormOnce starts n target_apps at once and returns when the last one
// made its first allocation (from the start of the storm), all succeeding.
func stormOnce(o options, env []string, n int) (float64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Duration
	var firstErr error
	var cmds []*exec.Cmd
	t0 := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, cmd, err := firstAlloc(o, env, "30")
			el := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if cmd != nil {
				cmds = append(cmds, cmd)
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if el > last {
				last = el
			}
		}()
	}
	wg.Wait()
	for _, c := range cmds {
		c.Process.Signal(syscall.SIGUSR1) // end the hold
	}
	for _, c := range cmds {
		c.Wait()
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(last.Nanoseconds()) / 1e6, nil
}

// stormBench runs attach storms of n processes of one job with the
// interceptor and bare storms, interleaved, and returns the median ratio
// of the last process's exec-to-first-allocation, and the medians.
func stormBench(o options, n, rounds int) (ratio, with, bare float64, err error) {
	// 1,000 contexts at fakecuda's realistic per-context cost would not
	// fit the GPU: on this node a context costs nothing (the daemon's
	// context probe measures 0), with and without.
	d, err := startDaemon(o.build, "80GiB", true, "FAKECUDA_CTX_BYTES=0")
	if err != nil {
		return 0, 0, 0, err
	}
	defer d.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const id = "bench-storm"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: uint64(n+64) << 20}); err != nil {
		return 0, 0, 0, err
	}
	defer d.cl.DeleteSession(ctx, id)
	envs := [2][]string{d.bareEnv(o), d.jobEnv(o, id)}
	var ratios, ws, bs []float64
	for i := 0; i < rounds; i++ {
		var t [2]float64
		for k := 0; k < 2; k++ {
			j := (k + i) % 2
			v, err := stormOnce(o, envs[j], n)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("storm of %d (interceptor %v): %w", n, j == 1, err)
			}
			t[j] = v
		}
		ratios = append(ratios, t[1]/t[0])
		ws, bs = append(ws, t[1]), append(bs, t[0])
	}
	return median(ratios), median(ws), median(bs), nil
}
