package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/daemon/gpu"
)

// ComputeGauges are the compute share's figures per GPU (bounded labels:
// the node's GPUs), registered when the compute controller runs.
type ComputeGauges struct {
	active, held *prometheus.GaugeVec
	freezes      prometheus.Counter
	frozen       prometheus.Gauge
	gpus         []gpu.GPU
}

// ComputeGauges registers the compute share's gauges.
func (m *Metrics) ComputeGauges() *ComputeGauges {
	c := &ComputeGauges{gpus: m.gpus,
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuslice_compute_active_sessions",
			Help: "Sessions with a GPU time share that had work on the GPU in the last pass.",
		}, []string{"gpu", "uuid"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuslice_compute_held_sessions",
			Help: "Sessions held at the launch gate on the GPU after the last pass (ahead of their share or at their cap).",
		}, []string{"gpu", "uuid"}),
		freezes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuslice_compute_freezes_total",
			Help: "Cgroups of sessions frozen because they kept using the GPU while held at their share (the gate bypassed).",
		}),
		frozen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuslice_compute_frozen_cgroups",
			Help: "Cgroups of sessions frozen now by the compute share.",
		}),
	}
	m.Registry.MustRegister(c.active, c.held, c.freezes, c.frozen)
	return c
}

// Frozen records a freeze (frozen) or a thaw of one cgroup.
func (c *ComputeGauges) Frozen(_, _ string, frozen bool) {
	if frozen {
		c.freezes.Inc()
		c.frozen.Inc()
	} else {
		c.frozen.Dec()
	}
}

// Pass records one pass's decision on inventory GPU i.
func (c *ComputeGauges) Pass(i, active, held int) {
	if i < 0 || i >= len(c.gpus) {
		return
	}
	l := []string{strconv.Itoa(i), c.gpus[i].UUID}
	c.active.WithLabelValues(l...).Set(float64(active))
	c.held.WithLabelValues(l...).Set(float64(held))
}
