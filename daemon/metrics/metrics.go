// Package metrics exposes gpusliced's Prometheus metrics on its own
// registry. Per-GPU series carry the labels gpu (NVML index) and uuid, both
// bounded by the node's GPUs. No session label unless debug mode is on;
// those series exist only while their session does.
package metrics

import (
	"runtime"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics owns the registry and the counters fed by the daemon.
type Metrics struct {
	Registry *prometheus.Registry

	reclaims       prometheus.Counter
	reclaimedBytes *prometheus.CounterVec
	refusals       prometheus.Counter
	created        prometheus.Counter
	released       *prometheus.CounterVec
	ipcDuration    *prometheus.HistogramVec
	ipcObservers   [16]prometheus.Observer
	auditOverruns  *prometheus.CounterVec
	auditKills     *prometheus.CounterVec
	auditPasses    *prometheus.CounterVec
	auditDuration  prometheus.Histogram
	driverLimit    *prometheus.GaugeVec
	driverLimitOps *prometheus.CounterVec
	gpus           []gpu.GPU
}

// New builds the registry. Call Attach once the session manager exists.
func New(gpus []gpu.GPU) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), gpus: gpus}
	m.reclaims = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_reclaims_total",
		Help: "Attached processes whose memory was reclaimed after they exited or detached.",
	})
	m.reclaimedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_reclaimed_bytes_total",
		Help: "Bytes given back to sessions' ledgers from processes that exited without freeing them.",
	}, []string{"gpu", "uuid"})
	m.refusals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_admission_refusals_total",
		Help: "Session creations or quota changes refused because the GPU's quota capacity was exhausted.",
	})
	m.created = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_sessions_created_total",
		Help: "Sessions created.",
	})
	m.released = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_sessions_released_total",
		Help: "Sessions released, by reason (deleted, ttl, abandoned: the process that created it is gone).",
	}, []string{"reason"})
	m.ipcDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpuslice_ipc_request_duration_seconds",
		Help:    "Time to answer one IPC request, by request type.",
		Buckets: []float64{5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2, 0.1},
	}, []string{"type"})
	m.auditOverruns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_audit_overruns_total",
		Help: "Times the audit found a session holding more than its quota on the GPU by the driver's per-process figures.",
	}, []string{"gpu", "uuid"})
	m.auditKills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_audit_kills_total",
		Help: "Processes the audit killed for holding more than their session's quota on the GPU.",
	}, []string{"gpu", "uuid"})
	m.auditPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_audit_passes_total",
		Help: "Audit passes, by result (ok, error).",
	}, []string{"result"})
	m.auditDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gpuslice_audit_pass_duration_seconds",
		Help:    "Time one audit pass takes (read, decide, act).",
		Buckets: []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5},
	})
	m.driverLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpuslice_gpu_driver_memory_limit",
		Help: "1 when the driver enforces each job's quota on the GPU as a memory limit on the job's cgroup (NVML memory limits, R615+; enforcement driver+interceptor), 0 when the interceptor and the audit alone do (enforcement interceptor).",
	}, []string{"gpu", "uuid"})
	m.driverLimitOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_driver_memory_limit_operations_total",
		Help: "Driver memory limits on job cgroups set and cleared, by operation (set, clear) and result (ok, error); an error leaves the interceptor and the audit enforcing the quota.",
	}, []string{"op", "result"})
	for _, op := range []string{"set", "clear"} {
		m.driverLimitOps.WithLabelValues(op, "ok")
		m.driverLimitOps.WithLabelValues(op, "error")
	}
	for _, g := range gpus {
		m.auditOverruns.WithLabelValues(strconv.Itoa(g.Index), g.UUID)
		m.auditKills.WithLabelValues(strconv.Itoa(g.Index), g.UUID)
		v := 0.0
		if g.DriverLimit {
			v = 1
		}
		m.driverLimit.WithLabelValues(strconv.Itoa(g.Index), g.UUID).Set(v)
	}
	m.auditPasses.WithLabelValues("ok")
	m.auditPasses.WithLabelValues("error")
	for _, t := range []ipc.Type{ipc.TypePing, ipc.TypeAttach, ipc.TypeDetach, ipc.TypeStatus, ipc.TypeView} {
		m.ipcObservers[t] = m.ipcDuration.WithLabelValues(t.String())
	}
	for _, g := range gpus {
		m.reclaimedBytes.WithLabelValues(strconv.Itoa(g.Index), g.UUID)
	}
	m.released.WithLabelValues("deleted")
	m.released.WithLabelValues("ttl")
	m.released.WithLabelValues("abandoned")
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gpuslice_build_info",
		Help:        "A metric with a constant '1' value labelled by version and Go version of gpusliced.",
		ConstLabels: prometheus.Labels{"version": version.Version, "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	m.Registry.MustRegister(m.reclaims, m.reclaimedBytes, m.refusals, m.created, m.released, m.ipcDuration, buildInfo,
		m.auditOverruns, m.auditKills, m.auditPasses, m.auditDuration, m.driverLimit, m.driverLimitOps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// DriverLimitOp counts one driver memory limit set or cleared (op "set"
// or "clear") and whether it worked.
func (m *Metrics) DriverLimitOp(op string, err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	m.driverLimitOps.WithLabelValues(op, r).Inc()
}

// Events returns the session manager's event hooks feeding these metrics.
func (m *Metrics) Events() session.Events {
	return session.Events{
		Reclaimed: func(i int, b uint64) {
			if i >= 0 && i < len(m.gpus) {
				m.reclaimedBytes.WithLabelValues(strconv.Itoa(i), m.gpus[i].UUID).Add(float64(b))
			}
		},
		ProcessReclaim:  m.reclaims.Inc,
		AdmissionRefuse: m.refusals.Inc,
		Created:         m.created.Inc,
		Released:        func(r string) { m.released.WithLabelValues(r).Inc() },
	}
}

// AuditOverrun counts one audited overrun on inventory GPU i and the
// processes killed for it.
func (m *Metrics) AuditOverrun(i, killed int) {
	if i < 0 || i >= len(m.gpus) {
		return
	}
	l := []string{strconv.Itoa(i), m.gpus[i].UUID}
	m.auditOverruns.WithLabelValues(l...).Inc()
	m.auditKills.WithLabelValues(l...).Add(float64(killed))
}

// AuditPass records one audit pass.
func (m *Metrics) AuditPass(d time.Duration, err error) {
	m.auditDuration.Observe(d.Seconds())
	if err != nil {
		m.auditPasses.WithLabelValues("error").Inc()
	} else {
		m.auditPasses.WithLabelValues("ok").Inc()
	}
}

// ObserveIPC records one IPC request's duration.
func (m *Metrics) ObserveIPC(t ipc.Type, seconds float64) {
	if int(t) < len(m.ipcObservers) && m.ipcObservers[t] != nil {
		m.ipcObservers[t].Observe(seconds)
	}
}

// Attach registers the collector that reads the manager at scrape time.
func (m *Metrics) Attach(mgr *session.Manager, debug bool) {
	m.Registry.MustRegister(&collector{mgr: mgr, gpus: m.gpus, debug: debug})
}

var (
	descCapacity = prometheus.NewDesc("gpuslice_gpu_capacity_bytes",
		"Physical memory of the GPU.", []string{"gpu", "uuid"}, nil)
	descCommitted = prometheus.NewDesc("gpuslice_gpu_committed_bytes",
		"Sum of the quotas of live sessions on the GPU.", []string{"gpu", "uuid"}, nil)
	descUsed = prometheus.NewDesc("gpuslice_gpu_used_bytes",
		"Bytes charged in the ledgers of live sessions on the GPU.", []string{"gpu", "uuid"}, nil)
	descGPUSessions = prometheus.NewDesc("gpuslice_gpu_sessions",
		"Live sessions with a quota on the GPU.", []string{"gpu", "uuid"}, nil)
	descDenied = prometheus.NewDesc("gpuslice_allocation_denials_total",
		"Allocations refused by a session's quota on the GPU.", []string{"gpu", "uuid"}, nil)
	descCtxCost = prometheus.NewDesc("gpuslice_gpu_context_cost_bytes",
		"What a CUDA context costs on the GPU, as gpusliced measured it (absent until measured).", []string{"gpu", "uuid"}, nil)
	descSessions = prometheus.NewDesc("gpuslice_sessions",
		"Live sessions.", nil, nil)
	descAttached = prometheus.NewDesc("gpuslice_attached_processes",
		"Processes attached to a session.", nil, nil)
	descSessLimit = prometheus.NewDesc("gpuslice_session_limit_bytes",
		"Quota of a session on a GPU (debug mode only).", []string{"session", "uuid"}, nil)
	descSessUsed = prometheus.NewDesc("gpuslice_session_used_bytes",
		"Bytes charged to a session on a GPU (debug mode only).", []string{"session", "uuid"}, nil)
	descSessPeak = prometheus.NewDesc("gpuslice_session_peak_bytes",
		"Peak bytes charged to a session on a GPU (debug mode only).", []string{"session", "uuid"}, nil)
)

type collector struct {
	mgr   *session.Manager
	gpus  []gpu.GPU
	debug bool
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descCommitted, descUsed, descGPUSessions, descDenied, descCtxCost, descSessions, descAttached} {
		ch <- d
	}
	if c.debug {
		ch <- descSessLimit
		ch <- descSessUsed
		ch <- descSessPeak
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.mgr.Snapshot(c.debug)
	for i, g := range c.gpus {
		idx := strconv.Itoa(i)
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(g.Physical), idx, g.UUID)
		ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(st.Committed[i]), idx, g.UUID)
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(st.Used[i]), idx, g.UUID)
		ch <- prometheus.MustNewConstMetric(descGPUSessions, prometheus.GaugeValue, float64(st.Count[i]), idx, g.UUID)
		ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(st.Denied[i]), idx, g.UUID)
		if b, ok := c.mgr.ContextCost(i); ok {
			ch <- prometheus.MustNewConstMetric(descCtxCost, prometheus.GaugeValue, float64(b), idx, g.UUID)
		}
	}
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(st.Sessions))
	ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, float64(st.Attached))
	for _, s := range st.PerSess {
		for g, uuid := range s.UUIDs {
			ch <- prometheus.MustNewConstMetric(descSessLimit, prometheus.GaugeValue, float64(s.Limit[g]), s.ID, uuid)
			ch <- prometheus.MustNewConstMetric(descSessUsed, prometheus.GaugeValue, float64(s.Used[g]), s.ID, uuid)
			ch <- prometheus.MustNewConstMetric(descSessPeak, prometheus.GaugeValue, float64(s.Peak[g]), s.ID, uuid)
		}
	}
}
