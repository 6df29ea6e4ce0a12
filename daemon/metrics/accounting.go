package metrics

import (
	"time"

	"github.com/gpuslice/gpuslice/daemon/acctrecord"
	"github.com/prometheus/client_golang/prometheus"
)

// The accounting recorder's metrics (daemon/acctrecord): its queue, what
// reached Slurm's accounting, what was dropped and why, failed sends.

var (
	descAcctQueue = prometheus.NewDesc("gpuslice_accounting_queue_records",
		"Records of ended jobs waiting to be written to Slurm's accounting.", nil, nil)
	descAcctOldest = prometheus.NewDesc("gpuslice_accounting_oldest_record_age_seconds",
		"Age of the oldest record waiting for Slurm's accounting (since its job ended); 0 when none waits.", nil, nil)
	descAcctLastOK = prometheus.NewDesc("gpuslice_accounting_last_success_timestamp_seconds",
		"When a record last reached Slurm's accounting (Unix time); absent until one has since gpusliced started.", nil, nil)
)

// AccountingEvents returns the recorder's event hooks feeding the
// counters, and registers them and the queue's gauges (read from stats at
// scrape time).
func (m *Metrics) AccountingEvents(stats func() acctrecord.Stats) acctrecord.Events {
	sent := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_accounting_records_sent_total",
		Help: "Records of ended jobs written to Slurm's accounting (the job's AdminComment holds them).",
	})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuslice_accounting_records_dropped_total",
		Help: "Records of ended jobs not written to Slurm's accounting, by reason: queue_full (accounting_queue_max reached), no_accounting (Slurm has no slurmdbd), comment (the job's AdminComment is a site's own or unreadable), unknown_job (slurmdbd did not know the job for 7 days).",
	}, []string{"reason"})
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_accounting_send_failures_total",
		Help: "Attempts to write a record to Slurm's accounting that failed (slurmdbd unreachable, sacct or sacctmgr failing); the record waits and is sent again.",
	})
	writes := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuslice_accounting_writes_total",
		Help: "sacctmgr runs that wrote a job's AdminComment (one per node per job while slurmdbd is healthy).",
	})
	for _, r := range []string{acctrecord.DropQueueFull, acctrecord.DropNoAccounting, acctrecord.DropComment, acctrecord.DropUnknownJob} {
		dropped.WithLabelValues(r)
	}
	m.Registry.MustRegister(sent, dropped, failures, writes, acctCollector(stats))
	return acctrecord.Events{Sent: sent.Inc, Failed: failures.Inc, Write: writes.Inc,
		Dropped: func(r string) { dropped.WithLabelValues(r).Inc() }}
}

type acctCollector func() acctrecord.Stats

func (c acctCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAcctQueue
	ch <- descAcctOldest
	ch <- descAcctLastOK
}

func (c acctCollector) Collect(ch chan<- prometheus.Metric) {
	s := c()
	ch <- prometheus.MustNewConstMetric(descAcctQueue, prometheus.GaugeValue, float64(s.Queued))
	age := 0.0
	if !s.Oldest.IsZero() {
		age = max(0, time.Since(s.Oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descAcctOldest, prometheus.GaugeValue, age)
	if !s.LastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(descAcctLastOK, prometheus.GaugeValue, float64(s.LastSuccess.UnixNano())/1e9)
	}
}
