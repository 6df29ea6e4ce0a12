package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/compute"
	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/metrics"
	"github.com/gpuslice/gpuslice/daemon/session"
)

// computeInterval is how often GPU time is measured and the throttle
// words rewritten while a session has a share: one NVML sample period.
// While none has, the controller passes every computeIdleInterval, or at
// once when a share is given (computeShare.changed).
const (
	computeInterval     = 100 * time.Millisecond
	computeIdleInterval = time.Second
)

// computeShare holds the compute page (nil when it could not be made:
// launches are then never gated).
type computeShare struct {
	page *compute.Page
	wake chan struct{}
}

// openComputePage maps the compute page beside the IPC socket, where the
// interceptor looks for it (docs/daemon.md, "Compute share").
func openComputePage(cfg config.Config, log *slog.Logger) *computeShare {
	p, err := compute.OpenPage(filepath.Join(filepath.Dir(cfg.IPCSocket), "compute"))
	if err != nil {
		log.Warn("compute share disabled: no compute page", "err", err)
		return &computeShare{}
	}
	return &computeShare{page: p, wake: make(chan struct{}, 1)}
}

// changed is session.Options.ComputeChanged: a share was given or changed,
// so the controller passes now instead of at its idle pace.
func (c *computeShare) changed() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// assign is session.Options.ComputeAssign.
func (c *computeShare) assign(id string) {
	if c.page != nil && !c.page.Assign(id) {
		slog.Default().Warn("compute share: no slot on the compute page; launches not gated", "session", id)
	}
}

// start runs the controller until ctx ends.
func (c *computeShare) start(ctx context.Context, cfg config.Config, log *slog.Logger, mgr *session.Manager,
	gpus []gpu.GPU, met *metrics.Metrics, wg *sync.WaitGroup) {
	if c.page == nil {
		return
	}
	src, err := compute.OpenNVMLBusy(cfg.NVMLLibrary, len(gpus))
	if err != nil {
		log.Warn("compute share disabled: the driver's per-process utilisation cannot be read", "err", err)
		return
	}
	phys := make([]uint64, len(gpus))
	for i, g := range gpus {
		phys[i] = g.Physical
	}
	gauges := met.ComputeGauges()
	ctl := &compute.Controller{Page: c.page, Source: src, Sessions: mgr, Physical: phys,
		Interval: computeInterval, IdleInterval: computeIdleInterval, Wake: c.wake, Log: log,
		Passes: func(g int, entries map[string]compute.Entry) {
			active, held := 0, 0
			for _, e := range entries {
				if e.Active {
					active++
				}
				if e.Held {
					held++
				}
			}
			gauges.Pass(g, active, held)
		}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer src.Close()
		ctl.Run(ctx)
	}()
}
