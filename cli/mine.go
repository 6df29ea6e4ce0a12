package cli

// status, report and list: root reads any session through the admin
// socket; every other user reads their own jobs through the IPC socket
// (VIEW requests, identified by SO_PEERCRED), where another user's job and
// a job that does not exist get the same one line.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
)

const statusLong = `Without ID: the job you are in (inside a Slurm job step, or your only job on this node).
As root, reads any session through the admin socket. Every other user reads their own jobs
through the IPC socket; a job that is not theirs is answered "` + "no job of yours with that id on this node" + `",
whether or not it exists. Used and peak come from the job's ledger.`

const reportLong = `As root, reads any released session through the admin socket. Every other user reads
the reports of their own finished jobs through the IPC socket.`

const listLong = `As root, lists every live session (admin socket). With --mine, or as any other user,
lists your own running jobs and the finished jobs the daemon still keeps.`

// asRoot: the admin socket is root-only; everyone else uses the IPC view.
func asRoot() bool { return os.Geteuid() == 0 }

func (e *env) viewer() client.Viewer { return client.Viewer{Socket: e.ipcSock} }

func statusCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	jsonFlag(fs, e)
	return func(args []string) error {
		if len(args) > 1 {
			return usagef("expected at most one job ID, got %d arguments", len(args))
		}
		id := ""
		if len(args) == 1 {
			id = args[0]
		}
		if id != "" && asRoot() {
			ctx, cancel := ctxTimeout()
			defer cancel()
			s, err := e.client().GetSession(ctx, id)
			if !errors.Is(err, client.ErrUnavailable) {
				if err != nil {
					return err
				}
				return e.show(s, func(w io.Writer) { printSession(w, s) })
			}
		}
		if id == "" {
			id = currentJob(e.getenv)
		}
		js, err := e.viewer().Status(id)
		if err != nil {
			return err
		}
		return e.show(js, func(w io.Writer) {
			printSession(w, &js.Session)
			if js.ProcessesOmitted > 0 {
				fmt.Fprintf(w, "(%d more processes not shown)\n", js.ProcessesOmitted)
			}
		})
	}
}

// currentJob is the job the caller says it is in, passed to the daemon as a
// hint: the daemon decides (and checks ownership).
func currentJob(getenv func(string) string) string {
	if v := getenv("GPUSLICE_SESSION"); v != "" {
		return v
	}
	return getenv("SLURM_JOB_ID")
}

func reportCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	jsonFlag(fs, e)
	return func(args []string) error {
		id, err := oneID(args)
		if err != nil {
			return err
		}
		if asRoot() {
			ctx, cancel := ctxTimeout()
			defer cancel()
			r, err := e.client().History(ctx, id)
			if !errors.Is(err, client.ErrUnavailable) {
				if err != nil {
					return err
				}
				return e.show(r, func(w io.Writer) { printReport(w, r) })
			}
		}
		r, err := e.viewer().Report(id)
		if err != nil {
			return err
		}
		return e.show(r, func(w io.Writer) { printReport(w, r) })
	}
}

// MyJobs is list --mine's document.
type MyJobs struct {
	Running  []client.JobSummary `json:"running"`
	Finished []client.Report     `json:"finished"`
}

func listCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	mine := fs.Bool("mine", false, "your own running and finished jobs (needs no root)")
	jsonFlag(fs, e)
	return func(args []string) error {
		if len(args) != 0 {
			return usagef("list takes no arguments")
		}
		if !*mine && asRoot() {
			ctx, cancel := ctxTimeout()
			defer cancel()
			ss, err := e.client().ListSessions(ctx)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(ss)
			}
			return printSessionTable(e.stdout, ss)
		}
		jobs, err := myJobs(e.viewer(), uint32(os.Getuid()))
		if err != nil {
			return err
		}
		return e.show(jobs, func(w io.Writer) { printMyJobs(w, jobs) })
	}
}

// myJobs reads the caller's jobs; root's view holds everyone's, so it is
// cut down to the caller's uid here.
func myJobs(v client.Viewer, uid uint32) (*MyJobs, error) {
	live, err := v.Live()
	if err != nil {
		return nil, err
	}
	done, err := v.Finished()
	if err != nil {
		return nil, err
	}
	jobs := &MyJobs{Running: []client.JobSummary{}, Finished: []client.Report{}}
	for _, s := range live {
		if s.UID == uid {
			jobs.Running = append(jobs.Running, s)
		}
	}
	for _, r := range done {
		if r.UID == uid {
			jobs.Finished = append(jobs.Finished, r)
		}
	}
	return jobs, nil
}

func printMyJobs(w io.Writer, j *MyJobs) {
	if len(j.Running) == 0 {
		fmt.Fprintln(w, "No running job of yours on this node.")
	} else {
		fmt.Fprintln(w, "Running:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tGPUS\tQUOTA\tUSED\tPEAK\tDENIED\tPROCS")
		for _, s := range j.Running {
			var used, peak, denied uint64
			var idx []string
			for _, g := range s.GPUs {
				used += g.UsedBytes
				peak += g.PeakBytes
				denied += g.Denied
				idx = append(idx, gpuRef(g.Index, g.UUID))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.ID, strings.Join(idx, ","), quotaText(s.GPUs),
				size.Format(used), size.Format(peak), denied, s.Processes)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	if len(j.Finished) == 0 {
		fmt.Fprintln(w, "No finished job of yours kept on this node.")
		return
	}
	fmt.Fprintln(w, "Finished:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRELEASED\tQUOTA\tPEAK\tDENIED")
	for _, r := range j.Finished {
		var denied uint64
		var quotas, peaks []string
		for _, g := range r.GPUs {
			denied += g.Denied
			quotas = append(quotas, size.Format(g.LimitBytes))
			peaks = append(peaks, size.Format(g.PeakBytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.ID, r.Released.Local().Format(time.DateTime),
			strings.Join(quotas, "+"), strings.Join(peaks, "+"), denied)
	}
	tw.Flush()
}
