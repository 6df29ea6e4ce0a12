package main

// The allocation figures (docs/benchmarks.md): alloc_bench with
// and without the interceptor in paired rounds (allocBench), the same
// ratio with every thread on one core, where no cache line moves between
// cores so what is left is the instructions themselves, and the
// instructions the interceptor adds per pair (callgrind).

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
	"strings"
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
	if bare, n, err := callgrindAdded(o, env); err != nil {
		r.fail("alloc_free_added_instructions", err)
		r.fail("throughput_ratio_instruction_bound", err)
	} else {
		r.set("alloc_free_added_instructions", n)
		r.set("alloc_free_bare_instructions", bare)
		// Where no cache line is contended, throughput follows the
		// instructions: what the 8-thread ratios can reach.
		r.set("throughput_ratio_instruction_bound", bare/(bare+n))
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
		out, err := runProgram(e, taskset, "-c", "0", bin, "--threads", "8", "--ms", windowMS, "--size", strconv.Itoa(1<<20))
		if err != nil {
			return 0, err
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

// callgrindAdded: instructions per pair without the interceptor (bare:
// fakecuda's own), and with minus without, from two run lengths each (the
// difference cancels start-up and attach):
// bare = (without(n2) - without(n1)) / (n2 - n1),
// added = ((with(n2) - with(n1)) - (without(n2) - without(n1))) / (n2 - n1).
func callgrindAdded(o options, env allocEnv) (bare, added float64, err error) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return 0, 0, fmt.Errorf("valgrind (apt-get install valgrind): %w", err)
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
			return 0, 0, err
		}
	}
	bare = (v[1] - v[0]) / (n2 - n1)
	return bare, (v[3]-v[2])/(n2-n1) - bare, nil
}

// runProgram runs argv with env and returns what it printed; a failure
// carries what it said on stderr.
func runProgram(env []string, argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
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

type allocResult struct {
	Threads         int     `json:"threads"`
	Pairs           int64   `json:"pairs"`
	NsPerPairMedian float64 `json:"ns_per_pair_median"`
	PairsPerSec     float64 `json:"pairs_per_sec"`
}

// windowMS is how long a run of several threads lasts: its rate counts
// only the window in which every thread was running (alloc_bench --ms),
// not the start and the tail where some wait or are done.
const windowMS = "300"

func runAllocBench(bin string, env []string, threads int, size int64) (allocResult, error) {
	out, err := runProgram(env, bin, "--threads", strconv.Itoa(threads), "--ms", windowMS, "--size", strconv.FormatInt(size, 10))
	if err != nil {
		return allocResult{}, err
	}
	res, err := parseAllocResult(out)
	if err == nil && res.NsPerPairMedian <= 0 {
		err = fmt.Errorf("alloc_bench printed no time per pair: %q", out)
	}
	return res, err
}

// pairedAdded: the ns the interceptor adds to a pair, from alloc_bench
// --paired, which alternates batches through the interceptor and through
// the driver's own entry points in one process (one thread, 1 MiB): the
// median over the runs of each run's median batch difference. The same
// run without the interceptor, where both batches are the driver's, is
// the method's control (alloc_free_added_ns_control, ~0).
func pairedAdded(o options, bin string, without, with []string, r *results) error {
	run := func(env []string) (pairedResult, error) {
		out, err := runProgram(env, bin, "--paired", "--iters", "200000", "--size", strconv.Itoa(1<<20))
		if err != nil {
			return pairedResult{}, err
		}
		var res pairedResult
		if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || res.Pairs == 0 {
			return pairedResult{}, fmt.Errorf("alloc_bench --paired printed %q", out)
		}
		return res, nil
	}
	var added, control, linked, driver []float64
	for i := 0; i < o.rounds; i++ {
		a, err := run(without)
		if err != nil {
			return err
		}
		b, err := run(with)
		if err != nil {
			return err
		}
		control = append(control, a.Added)
		added = append(added, b.Added)
		linked, driver = append(linked, b.Linked), append(driver, b.Driver)
	}
	if median(added) < 1 {
		// What the interceptor adds is ~120 instructions a pair: a
		// difference near 0 means both batches went the same way.
		r.notes["alloc_free_added_ns_median"] = "the batches through the interceptor cost what the driver's cost: was it preloaded?"
	}
	r.set("alloc_free_added_ns_median", median(added))
	r.set("alloc_free_added_ns_min", percentile(added, 0))
	r.set("alloc_free_added_ns_max", percentile(added, 100))
	r.set("alloc_free_added_ns_control", median(control))
	r.set("alloc_free_ns_median_with", median(linked))
	r.set("alloc_free_ns_median_without", median(driver))
	return nil
}

type pairedResult struct {
	Pairs  int64   `json:"pairs"`
	Linked float64 `json:"ns_per_pair_linked"`
	Driver float64 `json:"ns_per_pair_driver"`
	Added  float64 `json:"ns_added_paired"`
}

func allocBench(o options, d *daemon, r *results) error {
	bin := filepath.Join(o.build, "examples", "alloc_bench")
	lib := filepath.Join(o.build, "lib", "libgpuslice.so")
	for _, p := range []string{bin, lib} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing (make build)", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const id = "bench-alloc"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 64 << 30}); err != nil {
		return err
	}
	without := append(baseEnv(), "LD_LIBRARY_PATH="+filepath.Join(o.build, "lib"),
		"FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state)
	with := append(append([]string(nil), without...), "LD_PRELOAD="+lib, "GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+d.ipcSock)

	// 1 MiB allocations hit fakecuda's per-thread mapping cache (~100 ns a
	// pair, far cheaper than a real driver's cuMemAlloc); 64 MiB ones take
	// fakecuda's mmap/munmap path, closer to what a real allocation costs.
	// The required keys use 1 MiB; the 64 MiB ratio is reported beside it.
	if err := pairedAdded(o, bin, without, with, r); err != nil {
		return err
	}
	configs := []struct {
		threads int
		size    int64
	}{{8, 1 << 20}, {8, 64 << 20}}
	for _, cfg := range configs {
		threads := cfg.threads
		var ppsWith, ppsWithout, ratios []float64
		// Warm up once each, then interleave: each round runs without and
		// with back to back, and its pair gives one difference and one
		// ratio (the machine's load drifts between rounds, not within one).
		if _, err := runAllocBench(bin, without, threads, cfg.size); err != nil {
			return err
		}
		if _, err := runAllocBench(bin, with, threads, cfg.size); err != nil {
			return err
		}
		for i := 0; i < o.rounds; i++ {
			a, err := runAllocBench(bin, without, threads, cfg.size)
			if err != nil {
				return err
			}
			b, err := runAllocBench(bin, with, threads, cfg.size)
			if err != nil {
				return err
			}
			ppsWithout = append(ppsWithout, a.PairsPerSec)
			ppsWith = append(ppsWith, b.PairsPerSec)
			ratios = append(ratios, b.PairsPerSec/a.PairsPerSec)
		}
		switch {
		case cfg.size != 1<<20:
			r.set("throughput_ratio_8threads_64mib", median(ratios))
			r.set("pairs_per_sec_8threads_64mib_without", median(ppsWithout))
			r.set("pairs_per_sec_8threads_64mib_with", median(ppsWith))
		default:
			r.set("throughput_ratio_8threads", median(ratios))
			r.set("throughput_ratio_8threads_min", percentile(ratios, 0))
			r.set("throughput_ratio_8threads_max", percentile(ratios, 100))
			r.set("pairs_per_sec_8threads_without", median(ppsWithout))
			r.set("pairs_per_sec_8threads_with", median(ppsWith))
		}
	}
	// Honesty check: the preloaded runs must have been charged to the session.
	// (A fresh deadline: the runs above take about half a minute.)
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.cl.GetSession(ctx, id)
	if err != nil {
		return err
	}
	var peak uint64
	for _, g := range s.GPUs {
		peak += g.PeakBytes
	}
	if peak == 0 {
		r.notes["alloc_free_added_ns_median"] = "the preloaded runs charged nothing to the session: the interceptor was not active"
		r.notes["throughput_ratio_8threads"] = r.notes["alloc_free_added_ns_median"]
	}
	r.set("alloc_session_peak_bytes", float64(peak))
	d.cl.DeleteSession(ctx, id)
	return nil
}
