package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/daemon/ctxprobe"
	"github.com/gpuslice/gpuslice/daemon/session"
)

// ctxProbeRetry is how long a GPU that could not be measured waits before
// the next try (it was busy, or the driver was not ready).
const ctxProbeRetry = 5 * time.Minute

// ctxCoster measures what a context costs on each GPU, once, with the
// context probe (daemon/ctxprobe), and hands the figures to the manager.
// Only GPUs that no session holds are measured, one at a time; a session
// created on a GPU while its probe runs waits for it (session.ProbeWait at
// most); and the probe itself leaves a GPU alone when any process holds
// it. Without a figure a job's first process measures the cost itself, as
// it always could.
type ctxCoster struct {
	opt  ctxprobe.Options
	log  *slog.Logger
	mgr  *session.Manager
	wg   *sync.WaitGroup
	mu   sync.Mutex
	busy bool        // a run is under way
	off  bool        // the probe is not installed: never run again
	next []time.Time // per inventory GPU: no try before this
	warn bool        // a failed run was logged at warn level already
}

func newCtxCoster(cfg config.Config, log *slog.Logger, mgr *session.Manager, wg *sync.WaitGroup) *ctxCoster {
	c := &ctxCoster{opt: ctxprobe.Options{Program: cfg.ContextProbe, CUDALibrary: cfg.CUDALibrary,
		NVMLLibrary: cfg.NVMLLibrary}, log: log, mgr: mgr, wg: wg, next: make([]time.Time, len(mgr.GPUs()))}
	if cfg.ContextProbe == "" {
		c.off = true
		log.Info("context probe off (context_probe is empty): a job's first process measures a context's cost itself")
	}
	return c
}

// poke starts a run, in the background, for the GPUs that need one and
// whose time has come. It returns at once.
func (c *ctxCoster) poke(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off || c.busy {
		return
	}
	now := time.Now()
	var idx []int
	for _, i := range c.mgr.ContextCostToMeasure() {
		if !now.Before(c.next[i]) {
			idx = append(idx, i)
			c.next[i] = now.Add(ctxProbeRetry)
		}
	}
	if len(idx) == 0 {
		return
	}
	c.busy = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(ctx, idx)
	}()
}

// run measures the GPUs one at a time, each held from session creation
// only while its own probe runs (session.BeginContextProbe).
func (c *ctxCoster) run(ctx context.Context, idx []int) {
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()
	for _, i := range idx {
		if ctx.Err() != nil || !c.mgr.BeginContextProbe(i) {
			continue
		}
		res, err := ctxprobe.Run(ctx, c.opt, []string{c.mgr.GPUs()[i].UUID})
		if err == nil {
			c.record(i, res[0])
		}
		c.mgr.EndContextProbe(i)
		if err != nil {
			c.failed(err)
			return
		}
	}
}

// failed logs a run that could not measure at all.
func (c *ctxCoster) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(err, ctxprobe.ErrNoProgram) {
		c.off = true
		c.log.Info("context probe not installed: a job's first process measures a context's cost itself",
			"context_probe", c.opt.Program)
		return
	}
	lvl := slog.LevelDebug
	if !c.warn {
		lvl, c.warn = slog.LevelWarn, true
	}
	c.log.Log(context.Background(), lvl, "context probe failed; a job's first process measures a context's cost itself; trying again later",
		"err", err, "retry", ctxProbeRetry)
}

func (c *ctxCoster) record(i int, r ctxprobe.Result) {
	switch r.State {
	case ctxprobe.Measured:
		c.mgr.SetContextCost(i, r.Bytes)
		c.log.Info("context cost measured", "gpu", i, "uuid", r.UUID, "bytes", r.Bytes)
	case ctxprobe.Busy:
		c.log.Debug("context cost not measured: GPU in use", "gpu", i, "uuid", r.UUID, "processes", r.Busy,
			"retry", ctxProbeRetry)
	default:
		c.log.Warn("context cost not measured", "gpu", i, "uuid", r.UUID, "why", r.Why, "retry", ctxProbeRetry)
	}
}
