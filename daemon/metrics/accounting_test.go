package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/acctrecord"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The accounting recorder's series: lint-clean, bounded labels, and the
// figures the recorder reports.
func TestAccountingMetrics(t *testing.T) {
	m := New(testGPUs)
	st := acctrecord.Stats{Queued: 3, Oldest: time.Now().Add(-90 * time.Second), LastSuccess: time.Unix(1700000000, 0)}
	ev := m.AccountingEvents(func() acctrecord.Stats { return st })
	ev.Sent()
	ev.Sent()
	ev.Failed()
	ev.Write()
	ev.Dropped(acctrecord.DropQueueFull)
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP gpuslice_accounting_queue_records Records of ended jobs waiting to be written to Slurm's accounting.
# TYPE gpuslice_accounting_queue_records gauge
gpuslice_accounting_queue_records 3
# HELP gpuslice_accounting_records_sent_total Records of ended jobs written to Slurm's accounting (the job's AdminComment holds them).
# TYPE gpuslice_accounting_records_sent_total counter
gpuslice_accounting_records_sent_total 2
# HELP gpuslice_accounting_send_failures_total Attempts to write a record to Slurm's accounting that failed (slurmdbd unreachable, sacct or sacctmgr failing); the record waits and is sent again.
# TYPE gpuslice_accounting_send_failures_total counter
gpuslice_accounting_send_failures_total 1
# HELP gpuslice_accounting_last_success_timestamp_seconds When a record last reached Slurm's accounting (Unix time); absent until one has since gpusliced started.
# TYPE gpuslice_accounting_last_success_timestamp_seconds gauge
gpuslice_accounting_last_success_timestamp_seconds 1.7e+09
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_accounting_queue_records",
		"gpuslice_accounting_records_sent_total", "gpuslice_accounting_send_failures_total",
		"gpuslice_accounting_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
	n, _ := testutil.GatherAndCount(m.Registry, "gpuslice_accounting_records_dropped_total")
	if n != 4 {
		t.Fatalf("%d dropped series, want one per reason (4)", n)
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuslice_accounting_oldest_record_age_seconds" {
			if age := mf.GetMetric()[0].GetGauge().GetValue(); age < 90 || age > 3600 {
				t.Fatalf("oldest record age %v s, want about 90", age)
			}
			return
		}
	}
	t.Fatal("no gpuslice_accounting_oldest_record_age_seconds")
}
