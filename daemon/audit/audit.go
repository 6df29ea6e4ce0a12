package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/size"
	"golang.org/x/sys/unix"
)

// Source reads each GPU's per-process usage.
type Source interface {
	Read() ([]Sample, error)
}

// Jobs tells which session a pid belongs to and what every session may
// hold.
type Jobs interface {
	// SessionOf returns the session pid belongs to ("" for none).
	SessionOf(pid uint32) string
	// Quotas returns every live session's limits.
	Quotas() Quotas
}

// Driver charges each job's processes what the driver holds for them
// beyond what their hooks charged (docs/ledger.md "Driver memory"), from
// every read of the Source.
type Driver interface {
	// Mark notes what the processes' hooks have charged, just before a
	// read.
	Mark()
	// Charge takes the read made after Mark. It returns whether a
	// process's figure grew: a growth is charged once a second read
	// confirms it, which the same pass makes.
	Charge(usage []Attributed) (grew bool)
	// Begin and Settle are called at the start and the end of every
	// pass.
	Begin()
	Settle()
}

// Actor does what the policy says with an overrun.
type Actor interface {
	Act(o Overrun) (stopped []uint32)
}

// Events receives what the loop saw; nil fields are skipped.
type Events struct {
	// Overrun is called once per overrun with the processes stopped.
	Overrun func(o Overrun, stopped []uint32)
	// Usage is called after each pass with each session's audited sums.
	Usage func(sums map[string]map[int]uint64)
	// Pass is called after each pass with its duration and error.
	Pass func(d time.Duration, err error)
}

// Loop runs the audit.
type Loop struct {
	Source   Source
	Jobs     Jobs
	Actor    Actor
	Driver   Driver // optional
	Events   Events
	Interval time.Duration
	// Confirm is the pause before the second read that confirms an
	// overrun (Steady).
	Confirm time.Duration
	Log     *slog.Logger
	// Kick, when set, asks for a pass now (Kicker): a job was refused
	// memory its quota allowed. Passes asked for this way are at least
	// MinGap apart, whoever asks and however often, and confirm an
	// overrun after KickConfirm (when shorter than Confirm): the harm is
	// already there.
	Kick        *Kicker
	MinGap      time.Duration
	KickConfirm time.Duration
}

// Kicker asks the audit loop for a pass out of turn. Asks made while one
// is pending are one ask.
type Kicker struct{ c chan struct{} }

// NewKicker makes a Kicker.
func NewKicker() *Kicker { return &Kicker{c: make(chan struct{}, 1)} }

// Kick asks for a pass; it never blocks.
func (k *Kicker) Kick() {
	select {
	case k.c <- struct{}{}:
	default:
	}
}

// Run audits every Interval, and when kicked, until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	var kick chan struct{}
	if l.Kick != nil {
		kick = l.Kick.c
	}
	var last time.Time
	for {
		confirm := l.Confirm
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
			if wait := l.MinGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			if l.KickConfirm > 0 {
				confirm = min(confirm, l.KickConfirm)
			}
		}
		begin := time.Now()
		err := l.pass(confirm)
		last = time.Now()
		if l.Events.Pass != nil {
			l.Events.Pass(last.Sub(begin), err)
		}
	}
}

// Pass reads, decides and acts once.
func (l *Loop) Pass() error { return l.pass(l.Confirm) }

// pass is Pass with the pause before the confirming read, made when an
// overrun or a process's driver memory grew (the Driver charges a growth
// once two reads agree).
func (l *Loop) pass(confirm time.Duration) error {
	if l.Driver != nil {
		l.Driver.Begin()
		defer l.Driver.Settle()
	}
	first, grew, err := l.read()
	if err != nil {
		return err
	}
	q := l.Jobs.Quotas()
	usage := l.attribute(first)
	overruns := Decide(q, usage)
	if len(overruns) > 0 || grew {
		// Confirm with a second read: only what a process holds in both
		// counts.
		time.Sleep(confirm)
		second, _, err := l.read()
		if err != nil {
			return err
		}
		if len(overruns) > 0 {
			usage = l.attribute(Steady(first, second))
			overruns = Decide(l.Jobs.Quotas(), usage)
		}
	}
	if l.Events.Usage != nil {
		l.Events.Usage(Sums(usage))
	}
	for _, o := range overruns {
		stopped := l.Actor.Act(o)
		if l.Events.Overrun != nil {
			l.Events.Overrun(o, stopped)
		}
	}
	return nil
}

// read reads the Source once and gives what it read to the Driver.
func (l *Loop) read() (s []Sample, grew bool, err error) {
	if l.Driver != nil {
		l.Driver.Mark()
	}
	s, err = l.Source.Read()
	if err != nil {
		return nil, false, fmt.Errorf("audit read: %w", err)
	}
	if l.Driver != nil {
		grew = l.Driver.Charge(l.attribute(s))
	}
	return s, grew, nil
}

func (l *Loop) attribute(samples []Sample) []Attributed {
	out := make([]Attributed, 0, len(samples))
	for _, s := range samples {
		out = append(out, Attributed{Sample: s, Session: l.Jobs.SessionOf(s.PID)})
	}
	return out
}

// LogOnly is the log-only policy: nothing is stopped.
type LogOnly struct{ Log *slog.Logger }

// Act logs the overrun.
func (a LogOnly) Act(o Overrun) []uint32 {
	a.Log.Warn("audit: session over its quota (policy log-only: nothing stopped)", overrunAttrs(o)...)
	return nil
}

// Killer is the kill policy: the victims get SIGKILL through a pidfd, each
// after checking it still belongs to the session (a pid reused meanwhile is
// left alone).
type Killer struct {
	Log  *slog.Logger
	Jobs Jobs
}

// Act kills o's victims and returns those signalled.
func (k Killer) Act(o Overrun) []uint32 {
	var stopped []uint32
	for _, pid := range o.Victims {
		if err := k.kill(o.Session, pid); err != nil {
			k.Log.Warn("audit: cannot stop process", "session", o.Session, "pid", pid, "err", err)
			continue
		}
		stopped = append(stopped, pid)
	}
	attrs := append(overrunAttrs(o), "killed", stopped)
	k.Log.Warn("audit: session over its quota; processes killed as the OOM killer would", attrs...)
	return stopped
}

func (k Killer) kill(session string, pid uint32) error {
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // already gone
		}
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	// The pidfd pins the process: check it is still the session's.
	if got := k.Jobs.SessionOf(pid); got != session {
		return fmt.Errorf("pid %d no longer belongs to session %q", pid, session)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	return nil
}

func overrunAttrs(o Overrun) []any {
	return []any{"session", o.Session, "gpu", o.GPU, "limit", size.Format(o.Limit), "used", size.Format(o.Used),
		"victims", o.Victims}
}

// Describe is the one-line account of an overrun for the job's report.
func Describe(o Overrun, uuid string, stopped []uint32, killPolicy bool, at time.Time) string {
	pids := make([]string, len(stopped))
	s := append([]uint32(nil), stopped...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	for i, p := range s {
		pids[i] = fmt.Sprint(p)
	}
	what := "nothing stopped (policy log-only)"
	if killPolicy {
		what = "killed pid " + strings.Join(pids, ", ")
	}
	return fmt.Sprintf("%s: GPU %s: the driver reports %s held against a quota of %s; %s",
		at.UTC().Format(time.RFC3339), uuid, size.Format(o.Used), size.Format(o.Limit), what)
}
