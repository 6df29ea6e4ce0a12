// Package ctxprobe runs gpuslice-ctxprobe (native/ctxprobe), which measures
// what a CUDA context costs on idle GPUs, and reads its answer.
//
// gpusliced measures the figure once per GPU and leaves it in every new
// session's ledger, so that a job's first process charges its contexts
// without loading and starting NVML (docs/daemon.md "Context cost").
package ctxprobe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Timeout bounds one run: a real driver creates a context in well under a
// second per GPU.
const Timeout = 2 * time.Minute

// State is what the probe found on one GPU.
type State int

const (
	// Measured: Bytes is what a context costs there.
	Measured State = iota
	// Busy: other processes held the GPU; nothing was created there.
	Busy
	// Failed: the GPU could not be measured (Why says why).
	Failed
)

// Result is the probe's answer for one GPU.
type Result struct {
	UUID  string
	State State
	Bytes uint64 // Measured: the cost
	Busy  int    // Busy: how many other processes held the GPU
	Why   string // Failed: the probe's reason
}

// Options name the probe and the libraries it loads.
type Options struct {
	Program     string // path of gpuslice-ctxprobe
	CUDALibrary string // libcuda.so.1 to load ("" : the default lookup)
	NVMLLibrary string // libnvidia-ml.so.1 to load ("" : the default lookup)
}

// ErrNoProgram is returned when the probe program does not exist.
var ErrNoProgram = errors.New("context probe not installed")

// Run measures the GPUs named by uuids (NVML's "GPU-..." form). It returns
// one result per GPU, in order, or an error when the probe could not run
// at all (its program missing, the driver or NVML not loadable) or
// answered something it should not.
func Run(ctx context.Context, opt Options, uuids []string) ([]Result, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	if _, err := os.Stat(opt.Program); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoProgram, err)
	}
	var args []string
	if opt.CUDALibrary != "" {
		args = append(args, "--cuda", opt.CUDALibrary)
	}
	if opt.NVMLLibrary != "" {
		args = append(args, "--nvml", opt.NVMLLibrary)
	}
	for _, u := range uuids {
		if !strings.HasPrefix(u, "GPU-") || strings.ContainsAny(u, " \n") {
			return nil, fmt.Errorf("context probe: %q is not a GPU UUID", u)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, opt.Program, append(args, uuids...)...)
	cmd.Env = env(os.Environ())
	// On a timeout or shutdown the probe goes with whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("context probe %s: %s", opt.Program, msg)
	}
	return parse(stdout.Bytes(), uuids)
}

// env is the daemon's environment for the probe, without what would hide
// GPUs from it or load anything into it.
func env(in []string) []string {
	var out []string
	for _, kv := range in {
		k, _, _ := strings.Cut(kv, "=")
		if k == "CUDA_VISIBLE_DEVICES" || k == "LD_PRELOAD" || strings.HasPrefix(k, "GPUSLICE_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// parse reads one line per GPU, in the order asked.
func parse(out []byte, uuids []string) ([]Result, error) {
	var res []Result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		n := len(res) + 1
		if len(res) == len(uuids) {
			return nil, fmt.Errorf("context probe: line %d: more lines than GPUs asked: %q", n, line)
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 || f[0] != uuids[len(res)] {
			return nil, fmt.Errorf("context probe: line %d: want %q <state> <value>, got %q", n, uuids[len(res)], line)
		}
		r := Result{UUID: f[0]}
		switch f[1] {
		case "ok":
			b, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("context probe: line %d: bytes %q: %w", n, f[2], err)
			}
			r.State, r.Bytes = Measured, b
		case "busy":
			b, err := strconv.Atoi(f[2])
			if err != nil || b < 1 {
				return nil, fmt.Errorf("context probe: line %d: process count %q", n, f[2])
			}
			r.State, r.Busy = Busy, b
		case "error":
			r.State, r.Why = Failed, f[2]
		default:
			return nil, fmt.Errorf("context probe: line %d: unknown state %q", n, f[1])
		}
		res = append(res, r)
	}
	if len(res) != len(uuids) {
		return nil, fmt.Errorf("context probe: %d lines for %d GPUs", len(res), len(uuids))
	}
	return res, nil
}
