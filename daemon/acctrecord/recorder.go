// Package acctrecord records each ended job's GPU-memory figures in
// Slurm's accounting (the job's AdminComment, internal/admincomment) out
// of the job's path: the Epilog hands gpusliced this node's record (the
// admin API's POST /v1/jobs/{id}/end) and returns; the record waits in the
// daemon's database (daemon/store) until one sender goroutine has written
// it with sacct and sacctmgr, through slurmdbd outages, gpusliced restarts
// and node reboots.
//
// How the sender treats slurmdbd:
//   - a record's first write waits for its node's turn: its index in the
//     job's node list times a step (Spread, at most SpreadMax over the
//     whole list), plus a jitter of up to one step, so a big job's nodes
//     do not all ask slurmdbd at once;
//   - one write per node per job when slurmdbd is healthy: read the
//     comment, merge this node's figures in, write, read back; a comment
//     that already holds them is not written again (a kill -9 between the
//     write and the dequeue); only a concurrent write of another node that
//     replaced ours makes a second one. sacctmgr cannot compare and swap:
//     another node that read the comment before our write may write after
//     our read-back, so a record leaves the queue only when a read Settle
//     after its write (longer than any other node's read-to-write, which
//     the command timeout bounds) still finds it; a first look
//     QuickCheck after the write finds most such losses in seconds. A job
//     of one node has no other writer: its read-back confirms it;
//   - when a command fails (slurmdbd down, no answer), every record waits:
//     exponential backoff from MinBackoff, doubled per failure up to
//     MaxBackoff, with jitter (a wait drawn in [d/2, d]), so records go
//     within MaxBackoff of slurmdbd's return and a cluster's nodes come
//     back spread out;
//   - a job slurmdbd does not know yet is retried on its own, with the
//     same backoff up to 5 minutes, and given up (logged, counted) when
//     slurmdbd has not known it for UnknownJobAge.
//
// The queue is bounded as slurmctld's own (MaxDBDMsgs): past QueueMax
// records a new one is not kept, counted, and said in one log line a
// minute.
package acctrecord

import (
	"fmt"
	"log/slog"
	"math/rand"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/admincomment"
	"github.com/gpuslice/gpuslice/internal/hostlist"
)

// Defaults of Options.
const (
	DefaultQueueMax   = 10000
	DefaultTimeout    = 30 * time.Second
	DefaultSpread     = 250 * time.Millisecond
	DefaultSpreadMax  = time.Minute
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 30 * time.Second
	DefaultQuickCheck = 3 * time.Second
	// unknownJobBackoff bounds the wait between tries of a record whose
	// job slurmdbd does not know (slurmctld has not sent it yet), so
	// that many such records do not ask slurmdbd every MaxBackoff.
	unknownJobBackoff = 5 * time.Minute
	// UnknownJobAge is how long a record whose job slurmdbd never knew
	// is kept (the job's record lost on Slurm's side).
	UnknownJobAge = 7 * 24 * time.Hour
)

// Reasons a record is dropped (the metric's label).
const (
	DropQueueFull    = "queue_full"
	DropNoAccounting = "no_accounting"
	DropComment      = "comment"     // the job's AdminComment is a site's own, or unreadable
	DropUnknownJob   = "unknown_job" // slurmdbd did not know the job for UnknownJobAge
)

// Options configure a Recorder. Zero values take the defaults.
type Options struct {
	Slurm Slurm
	// Off, when set, says why records are not kept ("": they are),
	// asked at each record: each is then dropped at once (a cluster
	// without slurmdbd; see the function Off).
	Off      func() string
	QueueMax int
	// Spread is the step per index in the job's node list before a
	// record's first write; SpreadMax bounds the whole list's.
	Spread, SpreadMax time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failure.
	MinBackoff, MaxBackoff time.Duration
	// Settle is the wait between a write and the read that confirms it
	// (default: the command timeout twice and 5 s). QuickCheck is the
	// wait before a first look, which finds at once most writes another
	// node's concurrent one replaced (default 3 s).
	Settle, QuickCheck time.Duration
	Log                *slog.Logger
	Events             Events
	// Seed seeds the jitter (0: the time).
	Seed int64
}

// Events report what the recorder does (metrics); nil ones are skipped.
type Events struct {
	Sent    func()              // a record is in Slurm's accounting
	Dropped func(reason string) // a record was not kept or given up
	Failed  func()              // a send failed (slurmdbd unreachable, a command failed)
	Write   func()              // sacctmgr was run
}

// Outcome tells the Epilog what became of its record.
type Outcome struct {
	Queued bool
	// Why nothing was queued ("" when Queued).
	Why string
}

type item struct {
	rec   store.AcctRecord
	node  admincomment.Node
	nodes []string
	due   time.Time
	tries int
	// writes counts this record's sacctmgr runs (the log's); lost the
	// writes another node's replaced, in a row.
	writes, lost int
	// wroteAt is the last write's time (zero: none since the start).
	wroteAt time.Time
	// placed: node.Index is this node's place in the job's node list
	// (from the Epilog's SLURM_JOB_NODELIST, else from slurmdbd's).
	placed bool
	// alone: Slurm said the job ran on this node only (its node count or
	// a node list of one), so no other node writes its comment and the
	// read-back after a write confirms it: no read Settle later.
	alone bool
	// finished: sent or dropped (done); a record kept in memory only is
	// then no longer written to disk (unsaved.go). Under Recorder.mu.
	finished bool
}

// placement is node's index in list, when list holds it and, the job's
// node count known (count > 0), as many nodes.
func placement(node string, list []string, count int) (int, bool) {
	if count > 0 && len(list) != count {
		return -1, false
	}
	for i, n := range list {
		if admincomment.Name(n) == admincomment.Name(node) {
			return i, true
		}
	}
	return -1, false
}

// Recorder keeps the queue and runs its sender.
type Recorder struct {
	st  *store.Store
	opt Options
	log *slog.Logger

	mu       sync.Mutex
	items    []*item // in queue order
	rng      *rand.Rand
	wake     chan struct{}
	down     time.Duration // current backoff after a failure; 0: healthy
	downTill time.Time
	lastOK   time.Time
	full     struct {
		said    time.Time
		dropped int
	}
	unsavedSaid time.Time // last said that a record is kept in memory only (unsaved.go)
}

// New opens the queue kept in st. Records queued before (a restart, a
// reboot) are sent again, each after its node's turn.
func New(st *store.Store, opt Options) (*Recorder, error) {
	if opt.QueueMax <= 0 {
		opt.QueueMax = DefaultQueueMax
	}
	if opt.Slurm.Timeout <= 0 {
		opt.Slurm.Timeout = DefaultTimeout
	}
	if opt.Spread <= 0 {
		opt.Spread = DefaultSpread
	}
	if opt.SpreadMax <= 0 {
		opt.SpreadMax = DefaultSpreadMax
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = DefaultMinBackoff
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(DefaultMaxBackoff, opt.MinBackoff)
	}
	if opt.Settle <= 0 {
		// another node's read may take a timeout, its write one more
		opt.Settle = 2*opt.Slurm.Timeout + 5*time.Second
	}
	if opt.QuickCheck <= 0 {
		opt.QuickCheck = DefaultQuickCheck
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	seed := opt.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	r := &Recorder{st: st, opt: opt, log: opt.Log, rng: rand.New(rand.NewSource(seed)), wake: make(chan struct{}, 1)}
	recs, err := st.AcctRecords()
	if err != nil {
		return nil, fmt.Errorf("accounting queue: %w", err)
	}
	now := time.Now()
	for _, rec := range recs {
		r.items = append(r.items, r.newItem(rec, now))
	}
	if len(recs) > 0 {
		r.log.Info("accounting: records of ended jobs still to send to Slurm's accounting", "records", len(recs))
	}
	return r, nil
}

// newItem places rec's node in its job's node list, when the Epilog's
// SLURM_JOB_NODELIST gave one (Slurm 22.05 gives none; a job of one node
// needs none), and sets its first turn. A node not placed here is placed
// by the list slurmdbd holds before it is written (Slurm.write). Called
// with mu held or before the sender runs.
func (r *Recorder) newItem(rec store.AcctRecord, now time.Time) *item {
	nodes, err := hostlist.Expand(rec.NodeList)
	if err != nil {
		nodes = nil
	}
	alone := rec.NodeCount == 1 || (len(nodes) == 1 && rec.NodeCount == 0)
	if len(nodes) == 0 && rec.NodeCount <= 1 {
		nodes = []string{rec.Node}
	}
	idx, placed := placement(rec.Node, nodes, rec.NodeCount)
	count := len(nodes)
	turn := idx
	if !placed {
		// its turn by its name until slurmdbd's list places it
		count = max(rec.NodeCount, 1)
		turn = int(fnv32(admincomment.Name(rec.Node)) % uint32(count))
	}
	n := admincomment.Node{Name: rec.Node, Index: idx, Nodes: count, QuotaMiB: admincomment.MiB(rec.QuotaBytes), Refused: rec.Refused}
	for _, g := range rec.GPUs {
		n.GPUs = append(n.GPUs, admincomment.GPU{UUID: g.UUID, QuotaMiB: admincomment.MiB(g.LimitBytes),
			PeakMiB: admincomment.MiB(g.PeakBytes), Denied: g.Denied})
	}
	step := min(r.opt.Spread, r.opt.SpreadMax/time.Duration(count))
	return &item{rec: rec, node: n, nodes: nodes, placed: placed, alone: placed && alone && count == 1,
		due: now.Add(step*time.Duration(turn) + r.jitter(step))}
}

// fnv32 is FNV-1a of s.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// jitter is a random duration in [0, d). Called with mu held or before
// the sender runs.
func (r *Recorder) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(r.rng.Int63n(int64(d)))
}

// Add queues one node's record of an ended job, durably once it returns.
func (r *Recorder) Add(rec store.AcctRecord) (Outcome, error) {
	if r.opt.Off != nil {
		if why := r.opt.Off(); why != "" {
			r.dropped(DropNoAccounting)
			r.log.Debug("accounting: figures not recorded", "job", rec.JobID, "why", why)
			return Outcome{Why: why}, nil
		}
	}
	if err := rec.Validate(); err != nil {
		return Outcome{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.items) >= r.opt.QueueMax {
		r.dropped(DropQueueFull)
		r.full.dropped++
		if time.Since(r.full.said) >= time.Minute {
			r.log.Error("accounting: queue full, the figures of ended jobs are not kept (slurmdbd unreachable for long?)",
				"queue_max", r.opt.QueueMax, "job", rec.JobID, "dropped_since_last_said", r.full.dropped)
			r.full.said, r.full.dropped = time.Now(), 0
		}
		return Outcome{Why: fmt.Sprintf("the accounting queue is full (%d records; accounting_queue_max)", r.opt.QueueMax)}, nil
	}
	saved, err := r.st.AddAcct(rec)
	if err != nil {
		// The state directory's filesystem full, say: the record is
		// kept in memory and sent all the same, and written to the
		// queue on disk once there is room (unsaved.go).
		r.keepUnsavedLocked(rec, err)
	} else {
		rec = saved
	}
	r.items = append(r.items, r.newItem(rec, time.Now()))
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return Outcome{Queued: true}, nil
}

func (r *Recorder) dropped(reason string) {
	if f := r.opt.Events.Dropped; f != nil {
		f(reason)
	}
}

// Stats are the queue's figures (metrics).
type Stats struct {
	Queued int
	// Oldest is when the oldest queued record's job ended (zero: none).
	Oldest time.Time
	// LastSuccess is the last time a record reached Slurm's accounting
	// (zero: none since start).
	LastSuccess time.Time
}

// Stats returns the queue's figures.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Queued: len(r.items), LastSuccess: r.lastOK}
	for _, it := range r.items {
		if s.Oldest.IsZero() || it.rec.Ended.Before(s.Oldest) {
			s.Oldest = it.rec.Ended
		}
	}
	return s
}

// done removes a record from the queue: sent, or dropped for reason.
func (r *Recorder) done(it *item, reason string) {
	r.mu.Lock()
	seq := it.rec.Seq // 0: never written to the disk's queue
	it.finished = true
	r.mu.Unlock()
	if seq != 0 {
		if err := r.st.DeleteAcct(seq); err != nil {
			// It stays on disk and is sent again after a restart (the
			// comment then holds it: nothing is written twice).
			r.log.Error("accounting: cannot remove a sent record from the queue", "job", it.rec.JobID, "err", err)
		}
	}
	r.mu.Lock()
	for i, x := range r.items {
		if x == it {
			r.items = append(r.items[:i], r.items[i+1:]...)
			break
		}
	}
	if reason == "" {
		r.lastOK = time.Now()
		if r.down > 0 {
			r.log.Info("accounting: Slurm's accounting answers again", "queued", len(r.items))
		}
		r.down, r.downTill = 0, time.Time{}
	}
	r.mu.Unlock()
	if reason != "" {
		r.dropped(reason)
	}
}
