// Package session holds gpusliced's sessions: admission, ledgers,
// attach/detach of processes, reclaim of dead ones, TTL reaping and
// re-adoption after a restart.
package session

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// Errors of the IPC path (the admin path uses the api sentinels).
var (
	ErrNotPermitted = errors.New("not permitted")
	ErrNoSlot       = ledger.ErrNoSlot
	// ErrNoSession: the process belongs to no session and runs unmanaged.
	ErrNoSession = errors.New("no session")
)

// Options configure a Manager.
type Options struct {
	LedgerDir        string
	Slots            int
	Overcommit       float64
	DefaultTTL       time.Duration
	HistoryRetention time.Duration
	Log              *slog.Logger
	Now              func() time.Time
	// Identity returns the Slurm job pid runs in ("" when none), decided
	// from the kernel (daemon/identity); ppid is pid's parent as the caller
	// just read it, 0 when it has not. Nil: names from the process only.
	Identity func(pid, ppid uint32) (job string, how identity.How)
	// ComputeAssign gives a new session its slot on the compute page
	// (daemon/compute), whether it has a GPU time share or not (one can be
	// given later); nil: no compute share.
	ComputeAssign func(id string)
	// ComputeChanged, when set, is told that a session was created with a
	// GPU time share or had its share given, changed or removed.
	ComputeChanged func()
	// ComputePolicy is the site's rule for the shares of sessions the
	// Prolog creates (computepolicy.go); nil: api.DefaultComputePolicy.
	ComputePolicy *api.ComputePolicy
	// DriverLimits, when set, mirrors each session's quotas into the
	// driver's memory limit on its job's cgroup (driverlimit.go): applied
	// at create, quota change and restore, removed at every release.
	DriverLimits DriverLimits
}

// Events receives counts for metrics. Nil fields are skipped.
type Events struct {
	Reclaimed       func(gpuIndex int, bytes uint64)
	ProcessReclaim  func()
	AdmissionRefuse func()
	Released        func(reason string)
	Created         func()
}

// Manager owns every session. Methods are safe for concurrent use.
type Manager struct {
	opt     Options
	gpus    []gpu.GPU
	byUUID  map[string]int
	st      *store.Store
	watcher *reclaim.Watcher
	ev      Events

	mu       sync.RWMutex
	sessions map[string]*Session
	bySLUID  map[string]string // SLUID -> session id, of the live sessions that have one
	// committed bytes and session count per inventory GPU: the sum of
	// the quotas in sessions, kept under mu (commitLocked).
	committed []uint64
	count     []int
	// what a context costs per inventory GPU, plus 1 (0: not measured),
	// the GPUs a context probe holds now, and a channel closed when one
	// ends; under mu (ctxcost.go).
	ctxCost   []uint64
	probing   []bool
	probeDone chan struct{}

	// denials of released sessions per GPU (keeps the counter monotonic).
	releasedMu     sync.Mutex
	releasedDenied []uint64

	// unwritten are the reports of released sessions the database could
	// not take (its filesystem full), by id, under mu: Sweep writes them
	// once there is room (unwritten.go).
	unwritten map[string]api.Report

	lastPrune time.Time // touched by Sweep only (one goroutine)
	// what the last audit pass found each session holding per inventory
	// GPU (ObserveAudit's sums, never written after), for Unused
	audited atomic.Pointer[map[string]map[int]uint64]
}

// Session is one live session.
type Session struct {
	mu       sync.Mutex          // serialises slot changes and limit changes
	released bool                // set under mu when the session is released
	deleting bool                // delete asked while processes were alive: released when they are gone
	images   map[int]uint64      // slot -> program image of its process (reclaim.ImageToken)
	drv      map[int]*driverAcct // slot -> driver memory charged to its process (driver.go)
	// unsaved counts the writes of rec the database refused (its
	// filesystem full), 0 once one went through: the sweep writes rec
	// again (unwritten.go)
	unsaved uint64

	auditPeak   []uint64 // per ledger GPU: the most the driver reported the session holding
	seenPeak    []uint64 // per ledger GPU: the most the daemon read in the ledger itself (figures.go)
	auditNotes  []string // audited overruns, for the report
	auditKilled int
	fig         *figures
	rec         store.Record
	uid         uint32 // owner, = rec.UID; never changes, read without mu
	led         *ledger.Ledger
	gidx        []int // ledger GPU g -> inventory index
}

// New creates a Manager. Call Restore, then start the watcher's Run.
func New(opt Options, gpus []gpu.GPU, st *store.Store, ev Events) (*Manager, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Slots <= 0 {
		opt.Slots = ledger.DefaultSlots
	}
	if len(gpus) > ledger.MaxGPUs {
		return nil, fmt.Errorf("%d GPUs on this node; the ledger holds at most %d", len(gpus), ledger.MaxGPUs)
	}
	m := &Manager{opt: opt, gpus: gpus, byUUID: map[string]int{}, st: st, ev: ev,
		sessions: map[string]*Session{}, bySLUID: map[string]string{}, releasedDenied: make([]uint64, len(gpus)),
		committed: make([]uint64, len(gpus)), count: make([]int, len(gpus)),
		ctxCost: make([]uint64, len(gpus)), probing: make([]bool, len(gpus)), probeDone: make(chan struct{})}
	for i, g := range gpus {
		m.byUUID[g.UUID] = i
	}
	w, err := reclaim.NewWatcher(m.onExit)
	if err != nil {
		return nil, err
	}
	m.watcher = w
	return m, nil
}

// JobOfSLUID returns the id of the live session created with sluid (as
// Slurm prints it), "" when none: daemon/identity's lookup for Slurm
// 26.05's cgroup directories.
func (m *Manager) JobOfSLUID(sluid string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.bySLUID[sluid]
}

// Watcher returns the process watcher (the caller runs and closes it).
func (m *Manager) Watcher() *reclaim.Watcher { return m.watcher }

// GPUs is the inventory.
func (m *Manager) GPUs() []gpu.GPU { return m.gpus }

// Close unmaps every ledger (files stay for the next start).
func (m *Manager) Close() {
	m.writeUnwritten()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		s.mu.Lock()
		s.led.Close()
		s.mu.Unlock()
	}
	m.sessions = map[string]*Session{}
	clear(m.bySLUID)
	clear(m.committed)
	clear(m.count)
}
