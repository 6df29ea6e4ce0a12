package prolog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
)

// Config is how the Prolog/Epilog reach gpusliced.
type Config struct {
	// AdminSocket is gpusliced's admin API socket.
	AdminSocket string
	// RetryTimeout bounds how long an unreachable daemon (restarting) is
	// retried before giving up.
	RetryTimeout time.Duration
	// CallTimeout bounds one API call.
	CallTimeout time.Duration
	// TTL of the sessions created; 0 takes gpusliced's default_ttl. It is
	// idle time: a session is reaped only after it had no live process for
	// about that long, so it must outlast the longest pause between two
	// GPU steps of a job.
	TTL time.Duration
	// RefusalDir receives one line per job whose quota gpusliced refused
	// (WriteRefusal); the SPANK plugin shows it to the user.
	RefusalDir string
	// Log receives one line per decision (slurmd keeps it in its log).
	Log io.Writer
}

func (c Config) logf(job Job, format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "job %s: "+format+"\n", append([]any{job.ID}, args...)...)
	}
}

// retry calls fn until it succeeds, fails with something other than
// client.ErrUnavailable, or RetryTimeout has passed since the first try.
func (c Config) retry(ctx context.Context, job Job, what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(c.RetryTimeout)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		err := fn(callCtx)
		cancel()
		if err == nil || !errors.Is(err, client.ErrUnavailable) {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%s: gpusliced unreachable for %v (%d attempts): %w", what, c.RetryTimeout, attempt, err)
		}
		if attempt == 1 {
			c.logf(job, "%s: gpusliced unreachable, retrying for up to %v: %v", what, c.RetryTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if wait < time.Second {
			wait *= 2
		}
	}
}

// Prolog creates the job's session: owned by the job's uid, with the quota
// on each of the job's GPUs. A job without a quota is left alone. Running
// it again for the same job is harmless (the daemon answers "same session").
// An error means the quota could not be set up: slurmd must not start the
// job.
func Prolog(ctx context.Context, cfg Config, job Job) error {
	if job.QuotaBytes == 0 {
		return nil
	}
	c := client.New(cfg.AdminSocket)
	defer c.Close()
	req := client.SessionRequest{ID: job.ID, UID: job.UID, QuotaBytes: job.QuotaBytes, GPUs: job.GPUs,
		TTLSeconds: int64(cfg.TTL / time.Second), Compute: job.Compute, ComputePolicy: true, SLUID: job.SLUID}
	var s *client.Session
	create := func(ctx context.Context) error {
		var err error
		s, err = c.CreateSession(ctx, req)
		return err
	}
	err := cfg.retry(ctx, job, "create session", create)
	if errors.Is(err, client.ErrConflict) {
		// A session with this id but another owner or quota: left over
		// from an earlier run of this job id (requeue) whose Epilog could
		// not release it. Replace it unless a process still uses it.
		err = replaceStale(ctx, cfg, c, job, create)
	}
	if err != nil {
		return fmt.Errorf("cannot set up the GPU memory quota of %s per GPU: %w", size.Format(job.QuotaBytes), err)
	}
	gpus := make([]string, 0, len(s.GPUs))
	for _, g := range s.GPUs {
		gpus = append(gpus, fmt.Sprintf("%s=%s", g.UUID, size.Format(g.LimitBytes)))
	}
	cfg.logf(job, "session for uid %d with quota %v", job.UID, gpus)
	return nil
}

func replaceStale(ctx context.Context, cfg Config, c *client.Client, job Job, create func(context.Context) error) error {
	var old *client.Session
	err := cfg.retry(ctx, job, "get session", func(ctx context.Context) error {
		var err error
		old, err = c.GetSession(ctx, job.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("session exists with another owner or quota and cannot be read: %w", err)
	}
	if len(old.Processes) > 0 {
		return fmt.Errorf("session %s exists with another owner (uid %d) or quota and has %d attached processes: %w",
			job.ID, old.UID, len(old.Processes), client.ErrConflict)
	}
	cfg.logf(job, "replacing stale session (uid %d) left by an earlier run of this job id", old.UID)
	err = cfg.retry(ctx, job, "delete stale session", func(ctx context.Context) error {
		_, err := c.DeleteSession(ctx, job.ID)
		return err
	})
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	return cfg.retry(ctx, job, "create session", create)
}

// Epilog ends the job on this node with one call to gpusliced (POST
// /v1/jobs/{id}/end): it releases the job's session, whose report (peak
// and final usage) the daemon keeps in its history (`gpuslice report
// <jobid>`), and queues this node's figures, or its refusal of the quota
// (job.Refused), for Slurm's accounting, which gpusliced writes out of
// the job's path (daemon/acctrecord). The Epilog runs no Slurm command and
// waits on nothing but gpusliced. No session is not an error (the Prolog
// may never have run), and neither is a daemon that stays unreachable or
// fails: a failing Epilog would drain the node, and gpusliced's TTL
// reaper releases the session once it is back. The returned report is nil
// in those cases.
func Epilog(ctx context.Context, cfg Config, job Job) *client.Report {
	if job.QuotaBytes == 0 {
		return nil
	}
	c := client.New(cfg.AdminSocket)
	defer c.Close()
	req := api.JobEndRequest{Node: job.Node, NodeList: job.NodeList, NodeCount: job.NodeCount, QuotaBytes: job.QuotaBytes,
		Refused: job.Refused, SLUID: job.SLUID}
	if req.Node == "" { // run by hand: this machine's name, as slurmd's default
		host, _ := os.Hostname()
		req.Node, _, _ = strings.Cut(host, ".")
	}
	var end *api.JobEnd
	err := cfg.retry(ctx, job, "end job", func(ctx context.Context) error {
		var err error
		end, err = c.EndJob(ctx, job.ID, req)
		return err
	})
	if err != nil {
		// Unreachable daemon, or an error of the daemon's: the session
		// stays until gpusliced's TTL reaper releases it.
		cfg.logf(job, "%v; leaving the session to gpusliced's TTL reaper", err)
		return nil
	}
	if end.Report != nil {
		for _, g := range end.Report.GPUs {
			cfg.logf(job, "released %s: limit %s, peak %s, final %s, reclaimed %s, denied %d",
				g.UUID, size.Format(g.LimitBytes), size.Format(g.PeakBytes), size.Format(g.FinalUsedBytes),
				size.Format(g.ReclaimedBytes), g.Denied)
		}
	} else {
		cfg.logf(job, "%s", end.Released)
	}
	if end.Accounting == api.AccountingQueued {
		cfg.logf(job, "figures queued by gpusliced for Slurm's accounting (AdminComment)")
	} else {
		cfg.logf(job, "figures not recorded in Slurm's accounting: %s", end.Accounting)
	}
	return end.Report
}

// ignoredEpilogFlags are the flags with which earlier releases' Epilog
// wrote to Slurm's accounting itself: accepted, so that a node upgraded
// before its slurm.conf keeps working, and ignored (gpusliced's sacct,
// sacctmgr and slurm_conf settings say how it reaches Slurm's accounting).
func ignoredEpilogFlags(fs *pflag.FlagSet) []string {
	fs.String("sacctmgr", "", "ignored (gpusliced records the job's figures in Slurm's accounting)")
	fs.String("sacct", "", "ignored (gpusliced records the job's figures in Slurm's accounting)")
	fs.Duration("accounting-wait", 0, "ignored (gpusliced records the job's figures in Slurm's accounting)")
	names := []string{"sacctmgr", "sacct", "accounting-wait"}
	for _, n := range names {
		_ = fs.MarkHidden(n)
	}
	return names
}
