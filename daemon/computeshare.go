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
	"github.com/gpuslice/gpuslice/daemon/identity"
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

// freezeAfter is how long a session held at its share may keep using the
// GPU before its processes are frozen (daemon/compute/freeze.go): well
// beyond what a held job's queued kernels take to finish.
const freezeAfter = 2 * time.Second

// computeShare holds the compute page (nil when it could not be made:
// launches are then never gated) and the freezer of held sessions that
// bypass the gate.
type computeShare struct {
	page   *compute.Page
	wake   chan struct{}
	freeze *compute.CgroupFreezer
}

// openComputePage maps the compute page beside the IPC socket
// (docs/compute-share.md), and thaws what a gpusliced that died
// left frozen.
func openComputePage(cfg config.Config, log *slog.Logger) *computeShare {
	root := filepath.Join("/sys/fs/cgroup", identity.V2Dir("/sys/fs/cgroup"))
	fr := &compute.CgroupFreezer{Root: root, Record: filepath.Join(cfg.RuntimeDir, "compute.frozen")}
	if thawed, err := fr.Recover(); err != nil || len(thawed) > 0 {
		log.Warn("compute share: thawed what a gpusliced that stopped uncleanly had frozen", "cgroups", thawed, "err", err)
	}
	p, err := compute.OpenPage(filepath.Join(filepath.Dir(cfg.IPCSocket), "compute"))
	if err != nil {
		log.Warn("compute share disabled: no compute page", "err", err)
		return &computeShare{}
	}
	return &computeShare{page: p, wake: make(chan struct{}, 1), freeze: fr}
}

// changed is session.Options.ComputeChanged: a share was given or changed,
// so the controller passes now instead of at its idle pace.
func (c *computeShare) changed() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// attachInfo is ipcserver.Options.Compute: the page's fd and the session's
// slot on it.
func (c *computeShare) attachInfo(id string) (int, uint32, uint64, bool) {
	if c.page == nil {
		return 0, 0, 0, false
	}
	slot, gen, ok := c.page.Slot(id)
	return c.page.FD(), slot, gen, ok
}

// assign is session.Options.ComputeAssign.
func (c *computeShare) assign(id string) {
	if c.page != nil && !c.page.Assign(id) {
		slog.Default().Warn("compute share: no slot on the compute page; launches not gated", "session", id)
	}
}

// start runs the controller until ctx ends.
func (c *computeShare) start(ctx context.Context, cfg config.Config, log *slog.Logger, mgr *session.Manager,
	gpus []gpu.GPU, met *metrics.Metrics, wg *sync.WaitGroup, leaf func(uint32) (string, string)) {
	if c.page == nil {
		return
	}
	src, err := compute.OpenNVMLBusy(cfg.NVMLLibrary, len(gpus))
	if err != nil {
		log.Warn("compute share disabled: the driver's per-process utilisation cannot be read", "err", err)
		return
	}
	src.Stepped = func(g int, from, to uint64) {
		log.Warn("compute share: the GPU's utilisation samples went back in time (the node's clock was stepped back); reading on from the newest",
			"gpu", g, "newest_seen_us", from, "reading_from_us", to, "back_s", float64(from-to)/1e6)
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
		},
		Freezer: c.freeze, Leaf: leaf, FreezeAfter: freezeAfter, Frozen: gauges.Frozen}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer src.Close()
		ctl.Run(ctx)
		if err := c.freeze.ThawAll(); err != nil {
			log.Error("compute share: cannot thaw", "err", err)
		}
	}()
}
