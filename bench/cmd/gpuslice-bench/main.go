// Command gpuslice-bench measures gpuslice against the targets of
// DESIGN.md and writes bench/results.json (`make bench`).
//
// Every figure comes from one run on this machine: the interceptor's cost is
// the difference between interleaved runs of alloc_bench with and without
// LD_PRELOAD; IPC, attach and session creation are timed against a real
// gpusliced on private sockets; RSS is read from /proc.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
)

func main() {
	os.Exit(run())
}

type options struct {
	build    string
	out      string
	rounds   int
	pings    int
	clients  int
	attaches int
	creates  int
	sessions int
	kills    int
	epilogs  int
	audits   int
	shorts   int
	auditN   int
	// figures of issue 11 (echo.go, procs.go, scale.go)
	ipcRounds   int
	execPairs   int
	storm       int
	stormRounds int
	scale       int
	// message floods (flood.go)
	floodRate   int
	floodProcs  int
	floodWindow time.Duration
	floodRounds int
	only        string
}

// runs says whether figure group g is measured (-only).
func (o options) runs(g string) bool {
	if o.only == "" {
		return true
	}
	for _, x := range strings.Split(o.only, ",") {
		if x == g {
			return true
		}
	}
	return false
}

func run() int {
	var o options
	flag.StringVar(&o.build, "build", "build", "build directory (bin/, lib/, examples/)")
	flag.StringVar(&o.out, "out", "bench/results.json", "results file")
	flag.IntVar(&o.rounds, "rounds", 11, "interleaved alloc_bench rounds per configuration")
	flag.IntVar(&o.pings, "pings", 84000, "sequential IPC pings (a tenth of them per client at 32 clients)")
	flag.IntVar(&o.clients, "clients", 32, "concurrent IPC clients")
	flag.IntVar(&o.attaches, "attaches", 1000, "attach/detach cycles")
	flag.IntVar(&o.creates, "creates", 200, "session creations timed")
	flag.IntVar(&o.sessions, "sessions", 1000, "sessions for the RSS figure")
	flag.IntVar(&o.kills, "kills", 20, "kill -9 reclaims timed")
	flag.IntVar(&o.epilogs, "epilogs", 200, "Epilogs timed (gpuslice-epilog, Slurm's accounting unreachable)")
	flag.IntVar(&o.audits, "audits", 10, "audited overruns timed (overrun -> process killed)")
	flag.IntVar(&o.shorts, "shorts", 20, "neighbours refused memory their quota promised, timed (refused -> bypassing process stopped)")
	flag.IntVar(&o.auditN, "audit-procs", 1000, "processes holding memory for the audit CPU figure (other counts are scaled to 1,000)")
	flag.IntVar(&o.ipcRounds, "ipc-rounds", 21, "interleaved rounds of gpusliced and echo-server pings")
	flag.IntVar(&o.execPairs, "exec-pairs", 30, "interleaved exec-to-first-allocation pairs")
	flag.IntVar(&o.storm, "storm", 1000, "processes of one job in an attach storm")
	flag.IntVar(&o.stormRounds, "storm-rounds", 5, "interleaved storm pairs")
	flag.IntVar(&o.scale, "scale-sessions", 10000, "sessions for the scale figures")
	flag.IntVar(&o.floodRate, "flood-rate", 2000, "messages a second in each flood (PING, SHORT, malformed)")
	flag.IntVar(&o.floodProcs, "flood-procs", 300, "processes of a job holding memory during the floods (each audit pass walks them)")
	flag.DurationVar(&o.floodWindow, "flood-window", 2*time.Second, "measuring window of each flood")
	flag.IntVar(&o.floodRounds, "flood-rounds", 3, "interleaved rounds of the floods")
	floodKind := flag.String("flood-send", "", "send this flood (internal; -flood-sock, -flood-session, -flood-gpu, -flood-rate)")
	floodSock := flag.String("flood-sock", "", "IPC socket of -flood-send (internal)")
	floodSession := flag.String("flood-session", "", "session -flood-send short_attached attaches to (internal)")
	floodGPU := flag.String("flood-gpu", "", "GPU UUID of -flood-send's SHORTs (internal)")
	flag.StringVar(&o.only, "only", "", "comma-separated figure groups: alloc,ipc,attach,create,reclaim,epilog,audit,flood,exec,storm,compute,scale (default all)")
	echo := flag.String("echo", "", "serve the reference echo server on this socket (internal)")
	readme := flag.String("readme", "", "only rewrite the performance table of this README from -out")
	flag.Parse()
	if *echo != "" {
		return echoServe(*echo)
	}
	if *floodKind != "" {
		return floodSend(*floodKind, *floodSock, *floodSession, *floodGPU, o.floodRate)
	}
	if *readme != "" {
		if err := writeReadme(*readme, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "gpuslice-bench:", err)
			return 1
		}
		return 0
	}
	build, err := filepath.Abs(o.build)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuslice-bench:", err)
		return 1
	}
	o.build = build
	res := results{values: map[string]any{}, notes: map[string]string{}}
	if o.only != "" {
		// some groups: the other groups' figures of the last run stay
		if err := res.keep(o.out); err != nil {
			fmt.Fprintln(os.Stderr, "gpuslice-bench:", err)
			return 1
		}
	}
	// Context for the figures: other work inflates tails and moves ratios.
	// The load average at the end counts the benchmark's own storms (and
	// lags a minute), so the other work is what kept the CPUs busy in the
	// second before the run.
	if v, ok := busyPct(time.Second); ok {
		res.set("cpu_busy_pct_before", v)
		if v > 10 {
			res.notes["cpu_busy_pct_before"] = fmt.Sprintf("the CPUs were %.0f%% busy in the second before the run: other work inflates tails and moves ratios", v)
		}
	}
	if err := measure(o, &res); err != nil {
		fmt.Fprintln(os.Stderr, "gpuslice-bench:", err)
		return 1
	}
	if v, ok := loadavg(); ok {
		res.set("loadavg_1m", v)
	}
	res.set("cpus", float64(runtime.NumCPU()))
	if err := res.write(o.out); err != nil {
		fmt.Fprintln(os.Stderr, "gpuslice-bench:", err)
		return 1
	}
	res.print(os.Stdout)
	fmt.Printf("\nwrote %s\n", o.out)
	return 0
}

// daemon is a private gpusliced for the benchmark.
type daemon struct {
	dir, ipcSock, adminSock, devices, state string
	node                                    []string // the fake node's settings (startDaemon's env), given to its processes too
	cmd                                     *exec.Cmd
	cl                                      *client.Client
}

// startDaemon starts gpusliced on a fake node with devices. With probe,
// its context probe runs (as installed) and startDaemon returns once it has
// measured every GPU; without, a session's first process measures a
// context's cost itself. env is added to the fake node's environment.
func startDaemon(build, devices string, probe bool, env ...string) (*daemon, error) {
	dir, err := os.MkdirTemp("/tmp", "gsb")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	d := &daemon{dir: dir, ipcSock: filepath.Join(dir, "ipc.sock"), adminSock: filepath.Join(dir, "admin.sock"),
		devices: devices, state: fmt.Sprintf("gsbench-%d-%d", os.Getpid(), time.Now().UnixNano()), node: env}
	logf, err := os.Create(filepath.Join(dir, "gpusliced.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(filepath.Join(build, "bin", "gpusliced"),
		"--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"),
		"--ipc-socket", d.ipcSock, "--admin-socket", d.adminSock,
		"--nvml-library", filepath.Join(build, "lib", "libnvidia-ml.so.1"), "--log-level", "warn",
		"--context-probe", probeProgram(build, probe), "--cuda-library", filepath.Join(build, "lib", "libcuda.so.1"))
	d.cmd.Env = append(append(baseEnv(), "FAKECUDA_DEVICES="+devices, "FAKECUDA_STATE="+d.state), env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start gpusliced: %w", err)
	}
	d.cl = client.New(d.adminSock)
	for start := time.Now(); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.cl.Health(ctx)
		cancel()
		if err == nil && probe {
			err = d.probed()
		}
		if err == nil {
			return d, nil
		}
		if time.Since(start) > 15*time.Second {
			log, _ := os.ReadFile(filepath.Join(dir, "gpusliced.log"))
			d.stop()
			return nil, fmt.Errorf("gpusliced did not start: %v\n%s", err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func probeProgram(build string, on bool) string {
	if !on {
		return ""
	}
	return filepath.Join(build, "bin", "gpuslice-ctxprobe")
}

// probed is nil once the daemon's GPU inventory gives a context cost for
// every GPU.
func (d *daemon) probed() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	gpus, err := d.cl.GPUs(ctx)
	if err != nil {
		return err
	}
	return api.ContextCostsMeasured(gpus)
}

func (d *daemon) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-done
		}
	}
	if d.cl != nil {
		d.cl.Close()
	}
	d.cmd, d.cl = nil, nil
	os.Remove("/dev/shm/fakecuda-" + d.state)
	os.RemoveAll(d.dir)
}

func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUSLICE_") || strings.HasPrefix(k, "FAKECUDA_") || k == "LD_PRELOAD" ||
			k == "LD_LIBRARY_PATH" || k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func measure(o options, r *results) error {
	d, err := startDaemon(o.build, "80GiB", true)
	if err != nil {
		return err
	}
	defer d.stop()
	fmt.Println("gpuslice-bench: daemon up; measuring (this takes a minute)")

	if o.runs("alloc") {
		if err := allocBench(o, d, r); err != nil {
			r.fail("alloc_free_added_ns_median", err)
			r.fail("throughput_ratio_8threads", err)
		}
	}
	if o.runs("alloc") {
		allocMore(o, d, r)
	}
	if o.runs("ipc") {
		if err := ipcRatios(o, d, r); err != nil {
			r.fail("ipc_ping_p50_ratio", err)
			r.fail("ipc_ping_p99_32_ratio", err)
		}
	}
	if o.runs("attach") {
		if p50, p99, err := attachBench(d, o.attaches); err != nil {
			r.fail("attach_p50_us", err)
		} else {
			r.set("attach_p50_us", p50)
			r.set("attach_p99_us", p99)
		}
	}
	if o.runs("exec") {
		if added, bare, err := execBench(o, d, o.execPairs, false); err != nil {
			r.fail("exec_to_first_alloc_added_ms", err)
		} else {
			r.set("exec_to_first_alloc_added_ms", added)
			r.set("exec_to_first_alloc_bare_ms", bare)
		}
		if added, _, err := execBench(o, d, o.execPairs, true); err != nil {
			r.fail("exec_to_first_alloc_first_of_session_added_ms", err)
		} else {
			r.set("exec_to_first_alloc_first_of_session_added_ms", added)
		}
		if added, err := execMeasuring(o); err != nil {
			r.fail("exec_to_first_alloc_first_of_session_measuring_added_ms", err)
		} else {
			r.set("exec_to_first_alloc_first_of_session_measuring_added_ms", added)
		}
	}
	if o.runs("storm") {
		key := fmt.Sprintf("attach_storm_%d_last_ratio", o.storm)
		if ratio, with, bare, err := stormBench(o, o.storm, o.stormRounds); err != nil {
			r.fail(key, err)
		} else {
			r.set(key, ratio)
			r.set(fmt.Sprintf("attach_storm_%d_last_ms", o.storm), with)
			r.set(fmt.Sprintf("attach_storm_%d_last_bare_ms", o.storm), bare)
		}
	}
	if o.runs("create") {
		if p50, p99, err := createBench(d, o.creates); err != nil {
			r.fail("session_create_p50_ms", err)
		} else {
			r.set("session_create_p50_ms", p50)
			r.set("session_create_p99_ms", p99)
		}
	}
	if o.runs("reclaim") {
		if p50, max, err := reclaimBench(o, d, o.kills); err != nil {
			r.fail("reclaim_after_kill_p50_ms", err)
		} else {
			r.set("reclaim_after_kill_p50_ms", p50)
			r.set("reclaim_after_kill_max_ms", max)
		}
	}
	if o.runs("epilog") {
		if p50, p99, err := epilogBench(o, o.epilogs); err != nil {
			r.fail("epilog_p99_ms", err)
		} else {
			r.set("epilog_p50_ms", p50)
			r.set("epilog_p99_ms", p99)
		}
	}
	if o.runs("audit") {
		if p50, max, err := auditActionBench(o, d, o.audits); err != nil {
			r.fail("audit_overrun_to_kill_p50_ms", err)
		} else {
			r.set("audit_overrun_to_kill_p50_ms", p50)
			r.set("audit_overrun_to_kill_max_ms", max)
		}
		if pct, idle, err := auditCPUBench(o, o.auditN, 10*time.Second); err != nil {
			r.fail("audit_cpu_pct_per_1000_procs", err)
		} else {
			r.set("audit_cpu_pct_per_1000_procs", pct)
			r.set("audit_cpu_idle_pct", idle)
		}
		r.set("audit_decide_us_per_1000_procs", auditDecideBench())
		if p50, p99, err := shortBench(o, d, o.shorts); err != nil {
			r.fail("neighbour_refused_p99_ms", err)
		} else {
			r.set("neighbour_refused_p50_ms", p50)
			r.set("neighbour_refused_p99_ms", p99)
		}
	}
	if o.runs("flood") {
		if err := floodBench(o, r); err != nil {
			r.fail("flood_short_cpu_over_ping_points", err)
		}
	}
	if o.runs("compute") {
		computeBench(o, d, r)
	}
	if o.runs("scale") {
		d.stop() // the scale daemon runs alone
		if err := scaleBench(o, r); err != nil {
			r.fail("sessions_10k_rss_mib", err)
		}
	}
	return nil
}

// scrape reads /metrics from the admin socket once.
func scrape(sock string) error {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	resp, err := hc.Get("http://gpusliced/metrics")
	if err != nil {
		return fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 || n == 0 {
		return fmt.Errorf("scrape: %s, %d bytes, %v", resp.Status, n, err)
	}
	return nil
}
