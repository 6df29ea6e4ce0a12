package main

// The allocation figures beside allocBench's: the same ratio with every
// thread on one core (where no cache line moves between cores, so what is
// left is the instructions themselves), the instructions the interceptor
// adds per pair (callgrind), and the spread of the paired rounds.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// allocMore measures the one-core ratio and the callgrind count.
func allocMore(o options, d *daemon, r *results) {
	env, err := allocSession(o, d, "bench-alloc-more")
	if err != nil {
		r.fail("throughput_ratio_8threads_1core", err)
		r.fail("alloc_free_added_instructions", err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d.cl.DeleteSession(ctx, "bench-alloc-more")
	}()
	if lo, med, hi, err := oneCoreRatio(o, env); err != nil {
		r.fail("throughput_ratio_8threads_1core", err)
	} else {
		r.set("throughput_ratio_8threads_1core", med)
		r.set("throughput_ratio_8threads_1core_min", lo)
		r.set("throughput_ratio_8threads_1core_max", hi)
	}
	if n, err := callgrindAdded(o, env); err != nil {
		r.fail("alloc_free_added_instructions", err)
	} else {
		r.set("alloc_free_added_instructions", n)
	}
}

type allocEnv struct{ without, with []string }

func allocSession(o options, d *daemon, id string) (allocEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 64 << 30}); err != nil {
		return allocEnv{}, err
	}
	lib := filepath.Join(o.build, "lib", "libgpuslice.so")
	without := append(baseEnv(), "LD_LIBRARY_PATH="+filepath.Join(o.build, "lib"),
		"FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state)
	with := append(append([]string(nil), without...), "LD_PRELOAD="+lib, "GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+d.ipcSock)
	return allocEnv{without, with}, nil
}

// oneCoreRatio: interleaved rounds of 8 threads at 1 MiB under
// `taskset -c 0`, the ratio of each round's pair (with / without);
// min, median and max over the rounds.
func oneCoreRatio(o options, env allocEnv) (lo, med, hi float64, err error) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return 0, 0, 0, fmt.Errorf("taskset: %w", err)
	}
	bin := filepath.Join(o.build, "examples", "alloc_bench")
	run := func(e []string) (float64, error) {
		cmd := exec.Command(taskset, "-c", "0", bin, "--threads", "8", "--size", strconv.Itoa(1<<20))
		cmd.Env = e
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("alloc_bench on one core: %w: %s", err, stderr.String())
		}
		res, err := parseAllocResult(out)
		return res.PairsPerSec, err
	}
	var ratios []float64
	for i := 0; i < o.rounds; i++ {
		a, err := run(env.without)
		if err != nil {
			return 0, 0, 0, err
		}
		b, err := run(env.with)
		if err != nil {
			return 0, 0, 0, err
		}
		ratios = append(ratios, b/a)
	}
	return percentile(ratios, 0), median(ratios), percentile(ratios, 100), nil
}

var collected = regexp.MustCompile(`Collected : (\d+)`)

// callgrindAdded: instructions per pair with minus without the
// interceptor, from two run lengths each (the difference cancels start-up
// and attach): ((with(n2) - with(n1)) - (without(n2) - without(n1))) / (n2 - n1).
func callgrindAdded(o options, env allocEnv) (float64, error) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return 0, fmt.Errorf("valgrind (apt-get install valgrind): %w", err)
	}
	bin := filepath.Join(o.build, "examples", "alloc_bench")
	count := func(e []string, iters int) (float64, error) {
		cmd := exec.Command(vg, "--tool=callgrind", "--callgrind-out-file=/dev/null",
			bin, "--threads", "1", "--iters", strconv.Itoa(iters), "--size", strconv.Itoa(1<<20))
		cmd.Env = e
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil {
			return 0, fmt.Errorf("callgrind: %w: %s%s", err, out, stderr.String())
		}
		m := collected.FindSubmatch(stderr.Bytes())
		if m == nil {
			return 0, errors.New("callgrind printed no instruction count")
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
	const n1, n2 = 2000, 22000
	var v [4]float64
	for i, c := range []struct {
		e     []string
		iters int
	}{{env.without, n1}, {env.without, n2}, {env.with, n1}, {env.with, n2}} {
		if v[i], err = count(c.e, c.iters); err != nil {
			return 0, err
		}
	}
	return ((v[3] - v[2]) - (v[1] - v[0])) / (n2 - n1), nil
}

// parseAllocResult reads alloc_bench's JSON result line.
func parseAllocResult(out []byte) (allocResult, error) {
	for _, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		var res allocResult
		if bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &res) == nil && res.PairsPerSec > 0 {
			return res, nil
		}
	}
	return allocResult{}, fmt.Errorf("alloc_bench printed no result line: %q", out)
}
