package cli

// gpuslice seff JOBID: a finished job's GPU memory efficiency, as Slurm's
// seff prints its CPU and memory efficiency, from Slurm's accounting: what
// gpusliced recorded in the job's AdminComment from each node (its
// figures, never the job's own; docs/monitoring.md). It runs wherever sacct
// does (a login node); sacct decides which jobs the caller may see.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/internal/admincomment"
	"github.com/gpuslice/gpuslice/internal/advice"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/hostlist"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
)

const seffLong = `Reads the job from Slurm's accounting with sacct (any host with Slurm's client), as Slurm's
seff does for CPU and memory: per node and GPU the quota the job asked (--gpu-mem), its peak,
the efficiency (peak / quota) and the allocations refused, then what to ask next time. An
array job (its id alone) is summed up over its tasks, one line each; JOBID_TASK picks one
task. sacct shows the job's owner their jobs and administrators every job. The figures
are recorded by each node's gpusliced after the job ends there: a running job has none yet.`

// seffJob is one job (or array task) as seff reports it.
type seffJob struct {
	JobID string    `json:"job_id"`
	User  string    `json:"user"`
	State string    `json:"state"`
	Nodes string    `json:"nodes"`
	GPUs  []seffGPU `json:"gpus"`
	// Refusals: nodes whose gpusliced refused the job's quota.
	Refusals []seffRefusal `json:"refused_on,omitempty"`
	// PeakOn is where the highest peak was (GPU-… on node), and
	// NodesReported of NodesTotal nodes sent their figures: from the
	// summary gpuslice records (earlier releases' per-node entries fill
	// GPUs instead).
	PeakOn        string `json:"peak_on,omitempty"`
	NodesReported int    `json:"nodes_reported,omitempty"`
	NodesTotal    int    `json:"nodes_total,omitempty"`
	seffFigures
}

// seffGPU is one GPU of one node of a job.
type seffGPU struct {
	Node          string `json:"node,omitempty"`
	UUID          string `json:"uuid"`
	QuotaBytes    uint64 `json:"quota_bytes"`
	PeakBytes     uint64 `json:"peak_bytes"`
	EfficiencyPct int    `json:"efficiency_pct"`
	Refused       uint64 `json:"refused"`
}

// seffRefusal is a node that refused the job's quota.
type seffRefusal struct {
	Node       string `json:"node"`
	QuotaBytes uint64 `json:"quota_bytes"`
}

// seffFigures sum up GPUs: the highest peak, the quota it was held to,
// the efficiency there, the allocations refused, and the advice.
type seffFigures struct {
	PeakBytes     uint64      `json:"peak_bytes"`
	QuotaBytes    uint64      `json:"quota_bytes"`
	EfficiencyPct int         `json:"efficiency_pct"`
	Refused       uint64      `json:"refused"`
	Advice        advice.Kind `json:"advice"`
	Ask           string      `json:"ask,omitempty"` // the --gpu-mem to ask next time
}

// seffReport is what seff prints: the jobs with figures, and over them all
// (an array's tasks) the same sums.
type seffReport struct {
	Query   string      `json:"query"`
	Jobs    []seffJob   `json:"jobs"`
	Without []string    `json:"without_figures,omitempty"` // jobs sacct has without gpuslice's figures
	Summary seffFigures `json:"summary"`
}

var seffJobID = regexp.MustCompile(`^[0-9]+(_[0-9]+)?(\+[0-9]+)?$`)

func seffCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	jsonFlag(fs, e)
	sacct := fs.String("sacct", "sacct", "Slurm's sacct")
	return func(args []string) error {
		if len(args) != 1 {
			return usagef("expected one job ID, got %d arguments", len(args))
		}
		id := args[0]
		if !seffJobID.MatchString(id) {
			return usagef("job ID %q: expected a number, or an array task such as 1234_5", id)
		}
		ctx, cancel := ctxTimeout()
		defer cancel()
		rows, err := sacctRows(ctx, *sacct, id)
		if err != nil {
			return err
		}
		rep, err := seffOf(id, rows)
		if err != nil {
			return err
		}
		return e.show(rep, func(w io.Writer) { printSeff(w, rep) })
	}
}

// sacctRow is one job line of sacct -X.
type sacctRow struct {
	JobID, User, State, Nodes, Comment string
}

// sacctRows asks sacct for job id's lines (one per job, or per array task).
func sacctRows(ctx context.Context, sacct, id string) ([]sacctRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sacct, "-n", "-P", "-X", "-j", id, "-o", "JobID,User,State,NodeList,AdminComment")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		msg := err.Error()
		if errors.As(err, &ee) && len(strings.TrimSpace(string(ee.Stderr))) > 0 {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return nil, fmt.Errorf("sacct: %s", msg)
	}
	var rows []sacctRow
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.SplitN(l, "|", 5)
		if len(f) != 5 {
			return nil, fmt.Errorf("sacct: unexpected line %q", l)
		}
		rows = append(rows, sacctRow{JobID: f[0], User: f[1], State: f[2], Nodes: f[3], Comment: f[4]})
	}
	return rows, nil
}

// jobFigures reads a job's AdminComment: gpuslice's summary
// (internal/admincomment), or the per-node entries of earlier releases.
// ok is false when the comment holds no gpuslice figures.
func jobFigures(r sacctRow) (j seffJob, ok bool) {
	j = seffJob{JobID: r.JobID, User: r.User, State: r.State, Nodes: r.Nodes}
	s, kind, err := admincomment.Parse(r.Comment)
	switch {
	case err != nil || kind == admincomment.Empty:
		return j, false
	case kind == admincomment.Old:
		entries, err := admincomment.ParseOld(r.Comment)
		if err != nil {
			return j, false
		}
		for _, e := range entries {
			quota := e.QuotaMiB << 20
			if e.Refused {
				j.Refusals = append(j.Refusals, seffRefusal{Node: e.Node, QuotaBytes: quota})
				continue
			}
			j.GPUs = append(j.GPUs, seffGPU{Node: e.Node, UUID: e.UUID, QuotaBytes: quota, PeakBytes: e.PeakMiB << 20,
				Refused: e.Denied, EfficiencyPct: effPct(e.PeakMiB<<20, quota)})
		}
		sort.SliceStable(j.GPUs, func(a, b int) bool { return j.GPUs[a].Node < j.GPUs[b].Node })
		sumUp(&j.seffFigures, j.GPUs)
		return j, len(j.GPUs) > 0 || len(j.Refusals) > 0
	}
	names, _ := hostlist.Expand(r.Nodes) // sacct's NodeList, in the job's order
	s.Refused.Each(func(i int) {
		name := fmt.Sprintf("node #%d", i)
		if i < len(names) {
			name = names[i]
		}
		j.Refusals = append(j.Refusals, seffRefusal{Node: name, QuotaBytes: s.QuotaMiB << 20})
	})
	j.NodesReported, j.NodesTotal = s.Reported.Len(), s.Nodes
	if on := s.PeakOn; on != "" {
		node, gpu, _ := strings.Cut(on, "/")
		if rest, isGPU := strings.CutPrefix(gpu, "gpu-"); isGPU {
			gpu = "GPU-" + rest // sacctmgr stores it lowercase
		}
		j.PeakOn = gpu + " on " + node
	}
	j.PeakBytes, j.QuotaBytes, j.Refused = s.PeakMiB<<20, s.QuotaMiB<<20, s.Denied
	advise(&j.seffFigures)
	return j, true
}

func effPct(part, whole uint64) int {
	if whole == 0 {
		return 0
	}
	return int((float64(part)*100 + float64(whole)/2) / float64(whole))
}

// sumUp fills the figures over gpus: the highest peak and its quota.
func sumUp(f *seffFigures, gpus []seffGPU) {
	for _, g := range gpus {
		f.PeakBytes = max(f.PeakBytes, g.PeakBytes)
		f.QuotaBytes = max(f.QuotaBytes, g.QuotaBytes)
		f.Refused += g.Refused
	}
	advise(f)
}

// advise fills the efficiency and the advice from the peak, quota and
// allocations refused.
func advise(f *seffFigures) {
	f.EfficiencyPct = effPct(f.PeakBytes, f.QuotaBytes)
	k, ask := advice.Advise(f.PeakBytes, f.QuotaBytes, f.Refused)
	f.Advice = k
	if ask != 0 {
		f.Ask = advice.Ask(ask)
	}
}

// seffOf turns sacct's lines into the report.
func seffOf(id string, rows []sacctRow) (*seffReport, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("job %s: %w in Slurm's accounting (sacct shows you your own jobs, administrators every job)",
			id, client.ErrNotFound)
	}
	rep := &seffReport{Query: id, Jobs: []seffJob{}}
	for _, r := range rows {
		j, ok := jobFigures(r)
		if !ok {
			rep.Without = append(rep.Without, r.JobID)
			continue
		}
		rep.Jobs = append(rep.Jobs, j)
		// over the jobs: the highest peak and quota, the refusals summed
		rep.Summary.PeakBytes = max(rep.Summary.PeakBytes, j.PeakBytes)
		rep.Summary.QuotaBytes = max(rep.Summary.QuotaBytes, j.QuotaBytes)
		rep.Summary.Refused += j.Refused
	}
	advise(&rep.Summary)
	return rep, nil
}

func printSeff(w io.Writer, rep *seffReport) {
	if len(rep.Jobs) == 0 {
		fmt.Fprintf(w, "Job %s: no GPU memory figures in Slurm's accounting (%s).\n", rep.Query, strings.Join(rep.Without, ", "))
		fmt.Fprintf(w, "The job had no --gpu-mem quota, is still running, or ended before its nodes recorded them.\n")
		return
	}
	if len(rep.Jobs) == 1 {
		printSeffJob(w, &rep.Jobs[0])
	} else {
		printSeffArray(w, rep)
	}
	if len(rep.Without) > 0 {
		fmt.Fprintf(w, "Without GPU memory figures: %s\n", strings.Join(rep.Without, ", "))
	}
}

func printSeffJob(w io.Writer, j *seffJob) {
	fmt.Fprintf(w, "Job ID: %s\nUser: %s\nState: %s\nNodes: %s\n", j.JobID, j.User, j.State, j.Nodes)
	fmt.Fprintf(w, "GPU memory asked: %s per GPU (--gpu-mem)\n", size.Format(j.QuotaBytes))
	where := ""
	if len(j.GPUs) > 1 {
		where = fmt.Sprintf(" (the highest of %d GPUs)", len(j.GPUs))
	}
	if j.PeakOn != "" {
		where = " (" + j.PeakOn + ")"
	}
	fmt.Fprintf(w, "GPU memory peak: %s%s\n", size.Format(j.PeakBytes), where)
	fmt.Fprintf(w, "GPU memory efficiency: %d%% of %s\n", j.EfficiencyPct, size.Format(j.QuotaBytes))
	fmt.Fprintf(w, "Allocations refused: %d\n", j.Refused)
	if j.NodesTotal > 0 {
		fmt.Fprintf(w, "Nodes with figures: %d of %d\n", j.NodesReported, j.NodesTotal)
	}
	for _, r := range j.Refusals {
		fmt.Fprintf(w, "Quota refused on %s: gpusliced there could not give %s; the job did not run there\n", r.Node, size.Format(r.QuotaBytes))
	}
	if len(j.GPUs) > 1 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tGPU\tASKED\tPEAK\tEFFICIENCY\tREFUSED")
		for _, g := range j.GPUs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d%%\t%d\n", orDash(g.Node), g.UUID, size.Format(g.QuotaBytes),
				size.Format(g.PeakBytes), g.EfficiencyPct, g.Refused)
		}
		tw.Flush()
	} else if len(j.GPUs) == 1 {
		fmt.Fprintf(w, "GPU: %s on %s\n", j.GPUs[0].UUID, orDash(j.GPUs[0].Node))
	}
	printAdvice(w, &j.seffFigures, "")
}

func printSeffArray(w io.Writer, rep *seffReport) {
	fmt.Fprintf(w, "Job ID: %s (%d jobs with GPU memory figures)\n", rep.Query, len(rep.Jobs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tSTATE\tNODES\tASKED\tPEAK\tEFFICIENCY\tREFUSED")
	for _, j := range rep.Jobs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d%%\t%d\n", j.JobID, j.State, j.Nodes, size.Format(j.QuotaBytes),
			size.Format(j.PeakBytes), j.EfficiencyPct, j.Refused)
	}
	tw.Flush()
	s := &rep.Summary
	fmt.Fprintf(w, "GPU memory peak: %s (the highest of %d jobs)\n", size.Format(s.PeakBytes), len(rep.Jobs))
	fmt.Fprintf(w, "GPU memory efficiency: %d%% of %s\n", s.EfficiencyPct, size.Format(s.QuotaBytes))
	fmt.Fprintf(w, "Allocations refused: %d\n", s.Refused)
	printAdvice(w, s, " for every one of these jobs")
}

func printAdvice(w io.Writer, f *seffFigures, every string) {
	switch f.Advice {
	case advice.Lower:
		fmt.Fprintf(w, "Next time: --gpu-mem=%s would do%s (the peak plus a margin)\n", f.Ask, every)
	case advice.More:
		fmt.Fprintf(w, "Next time: ask for more, e.g. --gpu-mem=%s (the quota was reached)\n", f.Ask)
	default:
		fmt.Fprintf(w, "Next time: the same --gpu-mem fits\n")
	}
}
