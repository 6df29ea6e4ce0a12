package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

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

func (r *results) set(k string, v float64) {
	r.values[k] = round(v)
	delete(r.notes, k)
}
func (r *results) fail(k string, err error) {
	r.values[k] = nil
	r.notes[k] = err.Error()
	fmt.Fprintf(os.Stderr, "gpuslice-bench: %s: %v\n", k, err)
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// keep loads the figures of an earlier run from path (a run of some
// groups, -only, updates their keys and keeps the others'). No file:
// nothing to keep.
func (r *results) keep(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var old map[string]any
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for k, v := range old {
		if k == "notes" {
			if m, ok := v.(map[string]any); ok {
				for nk, nv := range m {
					if s, ok := nv.(string); ok {
						r.notes[nk] = s
					}
				}
			}
			continue
		}
		r.values[k] = v
	}
	return nil
}

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
type target struct {
	key, what string
	le        bool
	bound     float64
	unit      string
}

// text is the target as the tables write it ("≤ 15ns").
func (t target) text() string {
	op := "≤"
	if !t.le {
		op = "≥"
	}
	return fmt.Sprintf("%s %g%s", op, t.bound, t.unit)
}

// met says whether v meets the target (only a value past the bound
// misses it).
func (t target) met(v float64) bool {
	return !(t.le && v > t.bound || !t.le && v < t.bound)
}

var targets = []target{
	{"alloc_free_added_ns_median", "interceptor cost per alloc+free pair (1 thread, 1 MiB; batches with and without it alternated in one process)", true, 15, "ns"},
	{"alloc_free_added_instructions", "instructions added per alloc+free pair (callgrind, 1 thread)", true, 120, ""},
	{"throughput_ratio_8threads", "alloc/free throughput with/without interceptor (8 threads, 1 MiB; median of paired rounds)", false, 0.95, ""},
	{"throughput_ratio_8threads_1core", "  the same, all 8 threads pinned to one core", false, 0.95, ""},
	{"throughput_ratio_instruction_bound", "  what the instruction counts allow: fakecuda's pair / (its pair + added), callgrind", false, 0.95, ""},
	{"throughput_ratio_8threads_64mib", "  the same with 64 MiB allocations (fakecuda's mmap path)", false, 0.9, ""},
	{"ipc_ping_p50_ratio", "IPC ping p50, gpusliced / reference echo server (same rounds)", true, 1.2, ""},
	{"ipc_ping_p99_ratio", "  the same at p99", true, 1.2, ""},
	{"ipc_ping_p50_32_ratio", "IPC ping p50 at 32 clients, gpusliced / echo server", true, 1.2, ""},
	{"ipc_ping_p99_32_ratio", "  the same at p99", true, 1.2, ""},
	{"ipc_ping_cpu_32_ratio", "  the server's CPU time per ping at 32 clients, gpusliced / echo server", true, 1.2, ""},
	{"attach_p50_us", "ATTACH round trip, one process attaching again (Go client) p50", true, 300, "µs"},
	{"exec_to_first_alloc_added_ms", "exec -> first allocation, with interceptor minus without (a job's later process)", true, 0.3, " ms"},
	{"exec_to_first_alloc_first_of_session_added_ms", "  the same for a job's first process (a session of its own; gpusliced measured the context cost)", true, 0.3, " ms"},
	{"exec_to_first_alloc_first_of_session_measuring_added_ms", "  the same when gpusliced has no figure (probe off): the process measures the context cost with NVML", true, 0.3, " ms"},
	{"attach_storm_1000_last_ratio", "storm of 1,000 processes of one job: last first-allocation, with / without", true, 1.2, ""},
	{"session_create_p50_ms", "session create -> ready (admin API) p50", true, 25, "ms"},
	{"reclaim_after_kill_p50_ms", "kill -9 of a process holding 256 MiB -> ledger back to 0, p50", true, 1000, "ms"},
	{"epilog_p50_ms", "Epilog (release and record), exec to exit, Slurm's accounting unreachable, p50", true, 100, " ms"},
	{"epilog_p99_ms", "  the same at p99", true, 100, " ms"},
	{"sessions_10k_rss_mib", "gpusliced RSS, 10,000 sessions x 4 GPUs", true, 80, " MiB"},
	{"sessions_10k_fds_added", "gpusliced open fds added by idle sessions 100 to 10,000", true, 0, ""},
	{"ledger_bytes_per_idle_session", "memory (memfd blocks) of an idle session's ledger", true, 16384, " B"},
	{"list_10k_ms", "list 10,000 sessions (admin API, whole response)", true, 50, " ms"},
	{"create_p50_ms_10k", "session create p50 with 10,000 sessions", true, 5, " ms"},
	{"audit_overrun_to_kill_p50_ms", "audit: overrun (quota lowered) -> process killed, p50", true, 1000, "ms"},
	{"audit_overrun_to_kill_max_ms", "audit: overrun -> process killed, max", true, 1000, "ms"},
	{"neighbour_refused_p50_ms", "neighbour refused promised memory (bypass) -> bypasser stopped, p50", true, 50, "ms"},
	{"neighbour_refused_p99_ms", "neighbour refused promised memory -> bypasser stopped, p99", true, 50, "ms"},
	{"audit_cpu_pct_per_1000_procs", "daemon CPU with the audit, 1,000 processes holding memory (fakecuda NVML)", true, 1, "% core"},
	{"audit_decide_us_per_1000_procs", "audit pass without the NVML read, 1,000 processes", true, 2500, "µs"},
	{"flood_short_cpu_over_ping_points", "daemon CPU, SHORT flood from a user with no job minus the same rate of PING (2,000/s, a job of 300 processes on the GPU)", true, 5, " pts"},
	{"flood_short_conn_cpu_over_ping_points", "  the same, a connection per message (as the interceptor sends SHORT)", true, 5, " pts"},
	{"flood_malformed_cpu_over_ping_points", "  malformed frames (a connection each) minus PING on a connection each", true, 5, " pts"},
	{"flood_short_attached_cpu_over_ping_points", "  SHORT from a process attached to the job minus PING", true, 5, " pts"},
	{"flood_short_audit_passes_per_s", "audit passes during the SHORT flood from a user with no job (audit_interval 500ms: 2/s)", true, 2.2, "/s"},
	{"flood_short_attached_audit_passes_per_s", "audit passes during the SHORT flood from an attached process (2/s + 10/s per uid)", true, 12.5, "/s"},
	{"launch_gate_added_ns", "launch gate: added cost per cuLaunchKernel, uncontended (paired batches, one process)", true, 20, "ns"},
	{"compute_share_error_points_2", "compute share: distance of the measured share from the weight, 25/75, NVML over 10 s", true, 5, " pts"},
	{"compute_share_error_points_3", "  the same, weights 20/30/50", true, 5, " pts"},
}

func (r *results) print(w *os.File) {
	fmt.Fprintf(w, "\n%-32s %-58s %12s %10s  %s\n", "key", "what", "measured", "target", "")
	for _, t := range targets {
		target := t.text()
		v, ok := r.values[t.key].(float64)
		if !ok {
			fmt.Fprintf(w, "%-32s %-58s %12s %10s  %s\n", t.key, t.what, "n/a", target, "NOT MEASURED: "+r.notes[t.key])
			continue
		}
		verdict := "meets target"
		if !t.met(v) {
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
