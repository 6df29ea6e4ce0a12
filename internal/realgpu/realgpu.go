// Package realgpu renders the results of the real-GPU suite (tests/gpu: one
// JSON object a line, one line per case) into the Markdown page
// docs/real-gpu.md. It refuses results that did not come from a real GPU:
// a fakecuda run proves the suite works, never what a GPU does.
package realgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/jsonl"
)

// Versions describe the machine a run used, as the runner found them.
type Versions struct {
	GPU                    string            `json:"gpu"`
	GPUUUID                string            `json:"gpu_uuid"`
	GPUMemoryBytes         uint64            `json:"gpu_memory_bytes"`
	Driver                 string            `json:"driver"`
	CUDADriver             string            `json:"cuda_driver"`
	Fakecuda               bool              `json:"fakecuda"`
	Python                 string            `json:"python"`
	Kernel                 string            `json:"kernel"`
	Gpuslice               string            `json:"gpuslice"`
	Bundle                 string            `json:"bundle"` // a digest of the bundle's files: the build tested
	Frameworks             map[string]string `json:"frameworks"`
	ContextCostDaemonBytes *uint64           `json:"context_cost_daemon_bytes"`
	ContextCostNVMLBytes   *uint64           `json:"context_cost_nvml_bytes"`
	NVMLNamesOurPids       *bool             `json:"nvml_names_our_pids"`
}

// Run says when and where the suite ran.
type Run struct {
	Started string `json:"started"`
	Host    string `json:"host"`
	UID     int    `json:"uid"`
}

// Record is one case's line.
type Record struct {
	Name     string                     `json:"name"`
	Proves   string                     `json:"proves"`
	Verdict  string                     `json:"verdict"`
	Reason   string                     `json:"reason"`
	Failures []string                   `json:"failures"`
	Figures  map[string]json.RawMessage `json:"figures"`
	Seconds  float64                    `json:"seconds"`
	Versions Versions                   `json:"versions"`
	Run      Run                        `json:"run"`
}

// Sentinel errors.
var (
	ErrNoResults = errors.New("no results")
	ErrFakecuda  = errors.New("results come from fakecuda, not a GPU")
)

// Parse reads a results file: one JSON object a line, blank lines ignored.
// Every line must name its case and give a verdict the runner writes (pass,
// fail with its failures, skip with its reason).
func Parse(r io.Reader) ([]Record, error) {
	var recs []Record
	err := jsonl.Each(r, 16<<20, func(n int, line []byte) error {
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if strings.TrimSpace(rec.Name) == "" {
			return fmt.Errorf("line %d: no case name", n)
		}
		switch rec.Verdict {
		case "pass":
		case "fail":
			if len(rec.Failures) == 0 {
				return fmt.Errorf("line %d (%s): a failure without what failed", n, rec.Name)
			}
		case "skip":
			if strings.TrimSpace(rec.Reason) == "" {
				return fmt.Errorf("line %d (%s): a skip without its reason", n, rec.Name)
			}
		default:
			return fmt.Errorf("line %d (%s): verdict %q (want pass, fail or skip)", n, rec.Name, rec.Verdict)
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, ErrNoResults
	}
	return recs, nil
}

// Check refuses what must never become docs/real-gpu.md: a run on fakecuda
// (the runner's flag, or a GPU fakecuda named), a run without a driver
// version, lines from another machine or build than the first line's (GPU,
// driver, gpuslice, the bundle's digest or frameworks differ), or a case
// given twice. Lines of several runs of one build on one machine are taken
// (Merge: a second run with run.sh --rest runs what the first one's budget
// cut).
func Check(recs []Record) error {
	if len(recs) == 0 {
		return ErrNoResults
	}
	first := recs[0]
	seen := map[string]bool{}
	for _, r := range recs {
		v := r.Versions
		if v.Fakecuda || strings.Contains(strings.ToLower(v.GPU), "fakecuda") {
			return fmt.Errorf("%w (GPU %q, driver %q, case %s): docs/real-gpu.md only takes a run on a real GPU "+
				"(tests/gpu/README.md)", ErrFakecuda, v.GPU, v.Driver, r.Name)
		}
		if strings.TrimSpace(v.Driver) == "" || strings.TrimSpace(v.GPU) == "" {
			return fmt.Errorf("case %s: no GPU name or driver version in the results", r.Name)
		}
		if what := otherMachine(first.Versions, v); what != "" {
			return fmt.Errorf("case %s: from another machine or build than case %s (%s differs); "+
				"give the runs of one build on one GPU", r.Name, first.Name, what)
		}
		if seen[r.Name] {
			return fmt.Errorf("case %s: given twice (Merge takes a case from the last run that has it)", r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

// otherMachine names what differs between two lines' versions that a page
// must not mix: the GPU, the driver, gpuslice's version, the bundle's
// digest (it tells apart builds that carry one version: a change not yet
// committed) or the frameworks; "" when nothing does.
func otherMachine(a, b Versions) string {
	switch {
	case a.GPU != b.GPU || (a.GPUUUID != "" && b.GPUUUID != "" && a.GPUUUID != b.GPUUUID):
		return "the GPU"
	case a.Driver != b.Driver || a.CUDADriver != b.CUDADriver:
		return "the driver"
	case a.Gpuslice != b.Gpuslice:
		return "gpuslice's version"
	case a.Bundle != b.Bundle:
		return "the bundle (its files' digest)"
	case fmt.Sprint(a.Frameworks) != fmt.Sprint(b.Frameworks):
		return "the frameworks"
	}
	return ""
}

// Merge joins the results of runs given in order: every case of the first,
// a case in a later run replacing its earlier line in place, cases no
// earlier run had appended. It is how a run that the budget cut short is
// completed by a second one (run.sh --rest FIRST.jsonl runs only the cases
// the first marked cut); Check then refuses runs of another build or GPU.
func Merge(files ...[]Record) []Record {
	var out []Record
	at := map[string]int{}
	for _, recs := range files {
		for _, r := range recs {
			if i, ok := at[r.Name]; ok {
				out[i] = r
				continue
			}
			at[r.Name] = len(out)
			out = append(out, r)
		}
	}
	return out
}

// runs lists the distinct runs the lines come from, in order of their
// first line.
func runs(recs []Record) []Run {
	var out []Run
	seen := map[string]bool{}
	for _, r := range recs {
		if !seen[r.Run.Started] {
			seen[r.Run.Started] = true
			out = append(out, r.Run)
		}
	}
	return out
}

// when formats a run's start for the page.
func when(r Run) string {
	if t, err := time.Parse(time.RFC3339, r.Started); err == nil {
		return t.UTC().Format("2006-01-02 15:04 UTC")
	}
	return r.Started
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

func gib(b uint64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

func mib(p *uint64) string {
	if p == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.0f MiB", float64(*p)/(1<<20))
}

// figure reads a numeric figure of a case; ok is false when absent.
func figure(recs []Record, name, key string) (float64, bool) {
	for _, r := range recs {
		if r.Name != name || r.Verdict == "skip" {
			continue
		}
		raw, ok := r.Figures[key]
		if !ok {
			return 0, false
		}
		var v float64
		if json.Unmarshal(raw, &v) != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// target is one of DESIGN.md's real-GPU targets and where the suite records it.
type target struct {
	what, name, key string
	bound           float64
	atMost          bool
	unit            string
}

var targets = []target{
	{"added cost of an alloc+free pair (1 MiB, 1 thread)", "cost_alloc_free_pair", "added_percent", 1, true, "%"},
	{"8-thread alloc/free throughput, with / without", "cost_alloc_free_pair", "throughput_ratio_8threads", 0.99, false, ""},
	// The same on the plain path (GPUSLICE_PLAIN_PATH=1: no per-thread
	// credit or fronts): within the targets, that machinery goes.
	{"added cost of an alloc+free pair, plain path", "cost_alloc_free_pair", "added_percent_plain_path", 1, true, "%"},
	{"8-thread alloc/free throughput, plain path / without", "cost_alloc_free_pair", "throughput_ratio_8threads_plain_path", 0.99, false, ""},
	{"a small transformer's training step, added", "cost_training_step", "added_percent", 0.5, true, "%"},
	{"exec -> first allocation, added (a job's later process)", "cost_exec_first_alloc", "added_ms_later_process", 0.3, true, " ms"},
	{"exec -> first allocation, added (first process of a job)", "cost_exec_first_alloc", "added_ms_first_of_session", 0.3, true, " ms"},
}

// Render writes the page; now is the generation date it names.
func Render(w io.Writer, recs []Record, now time.Time) error {
	if err := Check(recs); err != nil {
		return err
	}
	v, rs := recs[0].Versions, runs(recs)
	var b strings.Builder
	b.WriteString("<!-- Generated by `make real-gpu-report` (cmd/realgpudoc) from a run of tests/gpu on a real GPU. Do not edit. -->\n")
	b.WriteString("# gpuslice on a real GPU\n\n")
	starts := make([]string, len(rs))
	for i, r := range rs {
		starts[i] = when(r)
	}
	label := "Run of "
	if len(rs) > 1 {
		label = "Runs of "
	}
	fmt.Fprintf(&b, "%s%s on **%s** (%s), NVIDIA driver %s, CUDA %s; generated %s by `make real-gpu-report`.\n\n",
		label, strings.Join(starts, ", "), cell(v.GPU), gib(v.GPUMemoryBytes), cell(v.Driver), cell(v.CUDADriver),
		now.UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "- gpuslice: %s\n- Python %s, kernel %s\n", cell(v.Gpuslice), cell(v.Python), cell(v.Kernel))
	for _, r := range rs[1:] {
		var names []string
		for _, rec := range recs {
			if rec.Run.Started == r.Started {
				names = append(names, rec.Name)
			}
		}
		fmt.Fprintf(&b, "- from the run of %s (`run.sh --rest`: what an earlier run's budget cut): %s\n",
			when(r), cell(strings.Join(names, ", ")))
	}
	if len(v.Frameworks) > 0 {
		names := make([]string, 0, len(v.Frameworks))
		for k := range v.Frameworks {
			names = append(names, k)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, k := range names {
			parts[i] = k + " " + v.Frameworks[k]
		}
		fmt.Fprintf(&b, "- frameworks: %s\n", cell(strings.Join(parts, ", ")))
	} else {
		b.WriteString("- frameworks: none installed\n")
	}
	fmt.Fprintf(&b, "- a CUDA context costs %s by NVML's per-process figure, %s by gpusliced's context probe\n",
		mib(v.ContextCostNVMLBytes), mib(v.ContextCostDaemonBytes))
	if v.NVMLNamesOurPids != nil && !*v.NVMLNamesOurPids {
		b.WriteString("- NVML's process list does not name this machine's pids: per-process figures were replaced by " +
			"differences of the device's used memory, and the audit cannot attribute memory here\n")
	}
	b.WriteString("\nThe suite (`tests/gpu`, described in `tests/gpu/README.md` of the source tree) runs every case's workload with " +
		"and without the interceptor and takes the driver's own figure, NVML's per-process usage read as root " +
		"outside the session, as the ground truth.\n\n")

	count := map[string]int{}
	for _, r := range recs {
		count[r.Verdict]++
	}
	fmt.Fprintf(&b, "**%d pass, %d fail, %d skip.**\n\n", count["pass"], count["fail"], count["skip"])
	b.WriteString("| case | verdict | proves | |\n| --- | --- | --- | --- |\n")
	for _, r := range recs {
		note := ""
		switch r.Verdict {
		case "skip":
			note = r.Reason
		case "fail":
			note = r.Failures[0]
			if len(note) > 200 {
				note = note[:200] + "…"
			}
			if len(r.Failures) > 1 {
				note += fmt.Sprintf(" (+%d more)", len(r.Failures)-1)
			}
		}
		fmt.Fprintf(&b, "| [%s](#%s) | %s | %s | %s |\n", cell(r.Name), r.Name, r.Verdict, cell(r.Proves), cell(note))
	}

	var rows []string
	for _, t := range targets {
		got, ok := figure(recs, t.name, t.key)
		if !ok {
			continue
		}
		meets := got <= t.bound
		op := "≤"
		if !t.atMost {
			meets, op = got >= t.bound, "≥"
		}
		verdict := "meets"
		if !meets {
			verdict = "**misses**"
		}
		rows = append(rows, fmt.Sprintf("| %s | %g%s | %s %g%s | %s |", t.what, got, t.unit, op, t.bound, t.unit, verdict))
	}
	if len(rows) > 0 {
		b.WriteString("\n## Targets (DESIGN.md)\n\n| what | measured | target | |\n| --- | --- | --- | --- |\n")
		b.WriteString(strings.Join(rows, "\n") + "\n")
	}

	b.WriteString("\n## Cases\n")
	for _, r := range recs {
		from := ""
		if len(rs) > 1 {
			from = "; run of " + when(r.Run)
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s: %s (%.1f s%s).\n", r.Name, r.Verdict, r.Proves, r.Seconds, from)
		if r.Verdict == "skip" {
			fmt.Fprintf(&b, "\nSkipped: %s\n", r.Reason)
		}
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "\n- %s", strings.Join(strings.Fields(f), " "))
		}
		if len(r.Failures) > 0 {
			b.WriteString("\n")
		}
		if len(r.Figures) > 0 {
			fig, err := json.MarshalIndent(r.Figures, "", "  ")
			if err != nil {
				return fmt.Errorf("case %s: figures: %w", r.Name, err)
			}
			fmt.Fprintf(&b, "\n```json\n%s\n```\n", fig)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
