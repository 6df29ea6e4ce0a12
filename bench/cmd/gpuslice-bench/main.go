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
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
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
	audits   int
	auditN   int
	// figures of issue 11 (echo.go, procs.go, scale.go)
	ipcRounds   int
	execPairs   int
	storm       int
	stormRounds int
	scale       int
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
	flag.IntVar(&o.pings, "pings", 20000, "sequential IPC pings")
	flag.IntVar(&o.clients, "clients", 32, "concurrent IPC clients")
	flag.IntVar(&o.attaches, "attaches", 1000, "attach/detach cycles")
	flag.IntVar(&o.creates, "creates", 200, "session creations timed")
	flag.IntVar(&o.sessions, "sessions", 1000, "sessions for the RSS figure")
	flag.IntVar(&o.kills, "kills", 20, "kill -9 reclaims timed")
	flag.IntVar(&o.audits, "audits", 10, "audited overruns timed (overrun -> process killed)")
	flag.IntVar(&o.auditN, "audit-procs", 200, "processes holding memory for the audit CPU figure")
	flag.IntVar(&o.ipcRounds, "ipc-rounds", 5, "interleaved rounds of gpusliced and echo-server pings")
	flag.IntVar(&o.execPairs, "exec-pairs", 30, "interleaved exec-to-first-allocation pairs")
	flag.IntVar(&o.storm, "storm", 1000, "processes of one job in an attach storm")
	flag.IntVar(&o.stormRounds, "storm-rounds", 5, "interleaved storm pairs")
	flag.IntVar(&o.scale, "scale-sessions", 10000, "sessions for the scale figures")
	flag.StringVar(&o.only, "only", "", "comma-separated figure groups: alloc,ipc,attach,create,reclaim,audit,exec,storm,scale (default all)")
	echo := flag.String("echo", "", "serve the reference echo server on this socket (internal)")
	readme := flag.String("readme", "", "only rewrite the performance table of this README from -out")
	flag.Parse()
	if *echo != "" {
		return echoServe(*echo)
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

// busyPct is how busy the machine's CPUs were over d, in percent (from
// /proc/stat: all but idle and iowait).
func busyPct(d time.Duration) (float64, bool) {
	sample := func() (busy, total uint64, ok bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			return 0, 0, false
		}
		for i, x := range f[1:] {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return 0, 0, false
			}
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, total, true
	}
	b0, t0, ok0 := sample()
	time.Sleep(d)
	b1, t1, ok1 := sample()
	if !ok0 || !ok1 || t1 <= t0 {
		return 0, false
	}
	return 100 * float64(b1-b0) / float64(t1-t0), true
}

// loadavg is the 1-minute load average.
func loadavg() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

type results struct {
	values map[string]any
	notes  map[string]string
}

func (r *results) set(k string, v float64) { r.values[k] = round(v) }
func (r *results) fail(k string, err error) {
	r.values[k] = nil
	r.notes[k] = err.Error()
	fmt.Fprintf(os.Stderr, "gpuslice-bench: %s: %v\n", k, err)
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

func (r *results) write(path string) error {
	out := map[string]any{}
	for k, v := range r.values {
		out[k] = v
	}
	if len(r.notes) > 0 {
		out["notes"] = r.notes
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// targets from DESIGN.md (plus the 1 s bound on reclaim after kill -9):
// key, description, comparison, bound.
var targets = []struct {
	key, what string
	le        bool
	bound     float64
	unit      string
}{
	{"alloc_free_added_ns_median", "interceptor cost per alloc+free pair (1 thread, 1 MiB; batches with and without it alternated in one process)", true, 15, "ns"},
	{"alloc_free_added_instructions", "instructions added per alloc+free pair (callgrind, 1 thread)", true, 120, ""},
	{"throughput_ratio_8threads", "alloc/free throughput with/without interceptor (8 threads, 1 MiB; median of paired rounds)", false, 0.95, ""},
	{"throughput_ratio_8threads_1core", "  the same, all 8 threads pinned to one core", false, 0.95, ""},
	{"throughput_ratio_8threads_64mib", "  the same with 64 MiB allocations (fakecuda's mmap path)", false, 0.9, ""},
	{"ipc_ping_p50_ratio", "IPC ping p50, gpusliced / reference echo server (same rounds)", true, 1.2, ""},
	{"ipc_ping_p99_ratio", "  the same at p99", true, 1.2, ""},
	{"ipc_ping_p50_32_ratio", "IPC ping p50 at 32 clients, gpusliced / echo server", true, 1.2, ""},
	{"ipc_ping_p99_32_ratio", "  the same at p99", true, 1.2, ""},
	{"attach_p50_us", "ATTACH round trip, one process attaching again (Go client) p50", true, 300, "µs"},
	{"exec_to_first_alloc_added_ms", "exec -> first allocation, with interceptor minus without (a job's later process)", true, 0.3, " ms"},
	{"exec_to_first_alloc_first_of_session_added_ms", "  the same for a job's first process (a session of its own; gpusliced measured the context cost)", true, 0.3, " ms"},
	{"exec_to_first_alloc_first_of_session_measuring_added_ms", "  the same when gpusliced has no figure (probe off): the process measures the context cost with NVML", true, 0.3, " ms"},
	{"attach_storm_1000_last_ratio", "storm of 1,000 processes of one job: last first-allocation, with / without", true, 1.2, ""},
	{"session_create_p50_ms", "session create -> ready (admin API) p50", true, 25, "ms"},
	{"reclaim_after_kill_p50_ms", "kill -9 of a process holding 256 MiB -> ledger back to 0, p50", true, 1000, "ms"},
	{"sessions_10k_rss_mib", "gpusliced RSS, 10,000 sessions x 4 GPUs", true, 80, " MiB"},
	{"sessions_10k_fds_added", "gpusliced open fds added by idle sessions 100 to 10,000", true, 0, ""},
	{"ledger_bytes_per_idle_session", "memory (memfd blocks) of an idle session's ledger", true, 16384, " B"},
	{"list_10k_ms", "list 10,000 sessions (admin API, whole response)", true, 50, " ms"},
	{"create_p50_ms_10k", "session create p50 with 10,000 sessions", true, 5, " ms"},
	{"audit_overrun_to_kill_p50_ms", "audit: overrun (quota lowered) -> process killed, p50", true, 1000, "ms"},
	{"audit_overrun_to_kill_max_ms", "audit: overrun -> process killed, max", true, 1000, "ms"},
	{"audit_cpu_pct_per_1000_procs", "daemon CPU with the audit, scaled to 1,000 processes (fakecuda NVML)", true, 1, "% core"},
	{"audit_decide_us_per_1000_procs", "audit pass without the NVML read, 1,000 processes", true, 2500, "µs"},
}

func (r *results) print(w *os.File) {
	fmt.Fprintf(w, "\n%-32s %-58s %12s %10s  %s\n", "key", "what", "measured", "target", "")
	for _, t := range targets {
		op := "≤"
		if !t.le {
			op = "≥"
		}
		target := fmt.Sprintf("%s %g%s", op, t.bound, t.unit)
		v, ok := r.values[t.key].(float64)
		if !ok {
			fmt.Fprintf(w, "%-32s %-58s %12s %10s  %s\n", t.key, t.what, "n/a", target, "NOT MEASURED: "+r.notes[t.key])
			continue
		}
		verdict := "meets target"
		if (t.le && v > t.bound) || (!t.le && v < t.bound) {
			verdict = "MISSES target"
		}
		fmt.Fprintf(w, "%-32s %-58s %12s %10s  %s\n", t.key, t.what, fmt.Sprintf("%.3g%s", v, t.unit), target, verdict)
	}
	if n, ok := r.notes["cpu_busy_pct_before"]; ok {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
}

func percentile(d []float64, p float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), d...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func median(d []float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), d...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// daemon is a private gpusliced for the benchmark.
type daemon struct {
	dir, ipcSock, adminSock, devices, state string
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
		devices: devices, state: fmt.Sprintf("gsbench-%d-%d", os.Getpid(), time.Now().UnixNano())}
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
	if o.runs("audit") {
		if p50, max, err := auditActionBench(o, d, o.audits); err != nil {
			r.fail("audit_overrun_to_kill_p50_ms", err)
		} else {
			r.set("audit_overrun_to_kill_p50_ms", p50)
			r.set("audit_overrun_to_kill_max_ms", max)
		}
		if pct, err := auditCPUBench(o, d, o.auditN, 10*time.Second); err != nil {
			r.fail("audit_cpu_pct_per_1000_procs", err)
		} else {
			r.set("audit_cpu_pct_per_1000_procs", pct)
		}
		r.set("audit_decide_us_per_1000_procs", auditDecideBench())
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
