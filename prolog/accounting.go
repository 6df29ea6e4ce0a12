package prolog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/spf13/pflag"
)

// The Epilog records each job's GPU-memory figures in Slurm's accounting,
// in the job's AdminComment: only an administrator can set it (the Epilog
// runs as root; a job's user cannot), slurmdbd stores it with the job and
// `sacct -o JobID,AdminComment` shows it. The figures are gpusliced's
// release report, never anything the job wrote.
//
// Slurm 22.05 refuses `scontrol update AdminComment=` once the job has
// finished, which it has when the node's Epilog runs ("Job has already
// finished"); so the Epilog writes to slurmdbd with
// `sacctmgr modify job where jobid=N set AdminComment=...`, which needs the
// node to reach slurmdbd (AccountingStorageHost), as sacct does.
//
// A cluster without accounting storage (AccountingStorageType other than
// accounting_storage/slurmdbd) makes sacct and sacctmgr say so at once,
// without asking anyone: the Epilog then records nothing and returns. With
// accounting, the whole step is bounded by Wait (default 5 s: slurmdbd
// normally holds the job's record from its start; the Epilog waits a
// little for one that is late, never longer), each call by Timeout.

// CommentTag starts gpuslice's part of a job's AdminComment.
const CommentTag = "gpuslice:"

// Accounting configures how the Epilog records a job's figures.
type Accounting struct {
	// Sacctmgr and Sacct are Slurm's programs; Sacctmgr "" turns
	// recording off.
	Sacctmgr, Sacct string
	// Timeout bounds each call; Wait bounds how long the Epilog waits for
	// slurmdbd to hold the job's record.
	Timeout, Wait time.Duration
	// run executes a command and returns its combined output (tests).
	run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// AccountingFlags registers the Epilog's accounting flags on fs.
func AccountingFlags(fs *pflag.FlagSet) *Accounting {
	a := &Accounting{Timeout: 3 * time.Second, Wait: 5 * time.Second}
	fs.StringVar(&a.Sacctmgr, "sacctmgr", "/usr/bin/sacctmgr",
		"sacctmgr used to record the job's quota and peak GPU memory in its AdminComment in Slurm's accounting (empty: do not record)")
	fs.StringVar(&a.Sacct, "sacct", "/usr/bin/sacct", "sacct used to read the job's AdminComment before adding to it")
	fs.DurationVar(&a.Wait, "accounting-wait", a.Wait,
		"the longest the Epilog spends recording the job's figures in Slurm's accounting (waiting for slurmdbd to hold the job)")
	return a
}

// FormatComment renders a report as gpuslice's AdminComment: per GPU its
// UUID, quota and peak in MiB (the peak rounded up) and the allocations
// denied, several GPUs separated by ";", e.g.
//
//	gpuslice:gpu-0fb77ae2-cd90-4869-996b-d2ca1bdef09b=quota_mib:8192,peak_mib:5121,denied:0
//
// All lowercase, without quotes or spaces: sacctmgr lowercases what it
// stores and stops a value at a quote.
func FormatComment(r *client.Report) string {
	parts := make([]string, 0, len(r.GPUs))
	for _, g := range r.GPUs {
		parts = append(parts, fmt.Sprintf("%s=quota_mib:%d,peak_mib:%d,denied:%d",
			strings.ToLower(g.UUID), g.LimitBytes>>20, (g.PeakBytes+(1<<20)-1)>>20, g.Denied))
	}
	return CommentTag + strings.Join(parts, ";")
}

// ours reports whether an AdminComment is empty or only gpuslice's (from
// an earlier run of the same job id): anything else is the site's, which
// sacctmgr would lowercase, so it is left alone.
func ours(existing string) bool {
	existing = strings.TrimSpace(existing)
	return existing == "" || existing == "(null)" ||
		(strings.HasPrefix(existing, CommentTag) && !strings.ContainsAny(existing, " '\""))
}

func (a *Accounting) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	if a.run != nil {
		return a.run(ctx, name, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = os.Environ() // slurmd's: SLURM_CONF when it set one
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// errNotYet: slurmdbd has no record of the job yet.
var errNotYet = errors.New("slurmdbd has no record of the job yet")

// errNoAccounting: Slurm has no accounting storage (no slurmdbd).
var errNoAccounting = errors.New("Slurm has no accounting storage (AccountingStorageType is not accounting_storage/slurmdbd)")

// noAccounting reports whether sacct's or sacctmgr's output says the
// cluster has no accounting storage: what Slurm 22.05-24.11 print then,
// from slurm.conf alone, without a connection.
func noAccounting(out []byte) bool {
	return bytes.Contains(out, []byte("accounting storage is disabled")) ||
		bytes.Contains(out, []byte("not running a supported accounting_storage plugin"))
}

// errSiteComment: the job's AdminComment holds someone else's data.
var errSiteComment = errors.New("the job's AdminComment holds other data; left alone")

// Record stores r in job's AdminComment. Failing to record is logged,
// never an error: a failing Epilog would drain the node.
func (a *Accounting) Record(ctx context.Context, cfg Config, job Job, r *client.Report) {
	if a == nil || a.Sacctmgr == "" || r == nil || len(r.GPUs) == 0 {
		return
	}
	comment := FormatComment(r)
	ctx, cancel := context.WithTimeout(ctx, a.Wait)
	defer cancel()
	wait := 250 * time.Millisecond
	var err error
	for {
		if err = a.record(ctx, job, comment); err == nil {
			cfg.logf(job, "recorded in Slurm's accounting (AdminComment): %s", comment)
			return
		}
		if errors.Is(err, errNoAccounting) {
			cfg.logf(job, "no accounting storage: figures not recorded in Slurm's accounting (%v)", err)
			return
		}
		if errors.Is(err, errSiteComment) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	cfg.logf(job, "could not record the GPU memory figures in Slurm's accounting (%s): %v", comment, err)
}

func (a *Accounting) record(ctx context.Context, job Job, comment string) error {
	if a.Sacct != "" {
		out, err := a.exec(ctx, a.Sacct, "-X", "-n", "-P", "-j", job.ID, "-o", "AdminComment")
		if err != nil && noAccounting(out) {
			return errNoAccounting
		}
		if err != nil {
			return fmt.Errorf("sacct: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if len(out) == 0 { // a job without a comment prints an empty line
			return errNotYet
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if last := lines[len(lines)-1]; !ours(last) { // the latest run of this job id
			return fmt.Errorf("%w: %q", errSiteComment, last)
		}
	}
	out, err := a.exec(ctx, a.Sacctmgr, "-i", "modify", "job", "where", "jobid="+job.ID, "set", "AdminComment="+comment)
	text := strings.TrimSpace(string(out))
	if err != nil && noAccounting(out) {
		return errNoAccounting
	}
	if err != nil {
		return fmt.Errorf("sacctmgr: %w: %s", err, text)
	}
	if strings.Contains(text, "Nothing modified") {
		return errNotYet
	}
	return nil
}
