package acctrecord

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gpuslice/gpuslice/internal/admincomment"
)

// The sender: one goroutine writes the queued records to Slurm's
// accounting, the one due first each time (the package comment says how
// it treats slurmdbd).

// next returns the queued record due first and when it is due (after
// any backoff), nil when the queue is empty.
func (r *Recorder) next() (*item, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first *item
	for _, it := range r.items {
		if first == nil || it.due.Before(first.due) {
			first = it
		}
	}
	if first == nil {
		return nil, time.Time{}
	}
	due := first.due
	if r.downTill.After(due) {
		due = r.downTill
	}
	return first, due
}

// Run sends the queued records until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		unsaved := r.saveUnsaved()
		it, due := r.next()
		wait := time.Hour
		if it != nil {
			wait = time.Until(due)
		}
		if unsaved && wait > unsavedRetry {
			wait = unsavedRetry
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				timer.Stop()
				continue
			case <-timer.C:
				continue // look again: a record added meanwhile may be due first
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.send(ctx, it)
	}
}

// send writes one record and decides what follows.
func (r *Recorder) send(ctx context.Context, it *item) {
	final, wrote, err := r.opt.Slurm.write(ctx, it)
	if wrote {
		if f := r.opt.Events.Write; f != nil {
			f()
		}
	}
	if ctx.Err() != nil {
		return // stopping: the record stays queued
	}
	job := it.rec.JobID
	if wrote {
		it.writes++
		it.wroteAt = time.Now()
	}
	switch {
	case err == nil && !it.alone && (wrote || time.Since(it.wroteAt) < r.opt.Settle):
		// In, but a node that read before our write may still write:
		// look again soon (QuickCheck: most such writes land within a
		// command's time, and the job's figures are whole in seconds),
		// and confirm after Settle.
		// (or found after a write whose read-back failed, Settle not
		// passed since).
		r.mu.Lock()
		it.due, it.lost = it.wroteAt.Add(r.opt.Settle), 0
		if wrote && r.opt.QuickCheck < r.opt.Settle {
			it.due = it.wroteAt.Add(r.opt.QuickCheck)
		}
		r.lastOK = time.Now()
		r.mu.Unlock()
		r.log.Debug("accounting: written, to be confirmed", "job", job, "comment", final)
	case err == nil:
		r.done(it, "")
		if f := r.opt.Events.Sent; f != nil {
			f()
		}
		r.log.Info("accounting: recorded in Slurm's accounting (AdminComment)", "job", job, "node", it.rec.Node,
			"comment", final, "writes", it.writes)
	case errors.Is(err, errNoAccounting):
		r.done(it, DropNoAccounting)
		r.log.Info("accounting: Slurm has no accounting storage; figures not recorded", "job", job)
	case errors.Is(err, admincomment.ErrForeign), errors.Is(err, admincomment.ErrMalformed):
		r.done(it, DropComment)
		r.log.Warn("accounting: the job's AdminComment is left alone; figures not recorded there", "job", job, "err", err)
	case errors.Is(err, errLost):
		// the job's other nodes write now: wait longer each time
		r.mu.Lock()
		it.lost++
		it.due = time.Now().Add(r.opt.Spread + r.jitter(min(r.opt.Spread<<min(it.lost, 10), r.opt.MaxBackoff)))
		r.mu.Unlock()
		r.log.Debug("accounting: writing again", "job", job, "err", err)
	case (errors.Is(err, errNotYet) || errors.Is(err, errNotPlaced)) && time.Since(it.rec.Ended) > UnknownJobAge:
		r.done(it, DropUnknownJob)
		r.log.Warn("accounting: slurmdbd has not known the job since it ended; its figures are not recorded there",
			"job", job, "ended", it.rec.Ended)
	case errors.Is(err, errNotYet), errors.Is(err, errNotPlaced):
		r.mu.Lock()
		it.tries++
		it.due = time.Now().Add(r.backoff(it.tries, unknownJobBackoff))
		r.mu.Unlock()
		r.log.Debug("accounting: slurmdbd does not know the job yet", "job", job, "tries", it.tries)
	default:
		if f := r.opt.Events.Failed; f != nil {
			f()
		}
		r.mu.Lock()
		r.down = min(max(2*r.down, r.opt.MinBackoff), r.opt.MaxBackoff)
		wait := r.down/2 + r.jitter(r.down/2+1)
		r.downTill = time.Now().Add(wait)
		first := r.down == r.opt.MinBackoff
		r.mu.Unlock()
		lvl := slog.LevelDebug
		if first {
			lvl = slog.LevelWarn
		}
		r.log.Log(ctx, lvl, "accounting: cannot reach Slurm's accounting; the records wait", "job", job,
			"queued", r.Stats().Queued, "retry_in", wait.Round(time.Millisecond), "err", err)
	}
}

// backoff is the wait before try n+1 of one record: MinBackoff doubled
// per try up to most, drawn in [d/2, d]. Called with mu held.
func (r *Recorder) backoff(tries int, most time.Duration) time.Duration {
	d := r.opt.MinBackoff
	for i := 1; i < tries && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	return d/2 + r.jitter(d/2+1)
}
