package security

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A job's process that runs without the interceptor (env -u LD_PRELOAD, a
// static binary) and takes more than the job's quota is seen by the audit
// in the driver's own per-process figures and killed, as the OOM killer
// would; the job's other process, within the quota, keeps running. The
// overrun is in the log, a metric and the job's report.
func TestUnpreloadedOverrunKilled(t *testing.T) {
	d := daemon(t)
	session(t, d, "4244", 0, 256*MiB)
	good := stepd(t, "4244", jobEnv(t, d, "4244"), "", gsProbe(t), "dev:0", "alloc:100M", "pause")
	good.Expect("paused")
	bad := stepd(t, "4244", d.Env(), "", gsProbe(t), "dev:0", "alloc:512M", "pause")
	bad.Expect("paused")
	select {
	case <-bad.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("a process holding 512 MiB in a 256 MiB job was not stopped\n%s", d.Log())
	}
	select {
	case <-good.Done():
		t.Fatalf("the job's process within its quota was stopped too:\n%s", good.Output())
	default:
	}
	// gpusliced counts the kill and writes its line after the kill: the
	// process can be seen gone first.
	kills := `gpuslice_audit_kills_total{gpu="0",uuid="` + firstUUID(t, d) + `"}`
	probe.Eventually(t, 5*time.Second, "the audit's kill counted and logged", func() (bool, string) {
		got := metric(t, d, kills)
		return got == "1" && strings.Contains(d.Log(), "audit: session over its quota"),
			"gpuslice_audit_kills_total = " + got
	})
	good.Send("")
	good.Wait()
	var rep *client.Report
	probe.Eventually(t, 10*time.Second, "session released", func() (bool, string) {
		r, err := d.Client().DeleteSession(ctx(t), "4244")
		rep = r
		return err == nil, "delete: " + errString(err)
	})
	if rep.AuditKilled < 1 || len(rep.Audit) == 0 || !strings.Contains(rep.Audit[0], "killed pid") {
		t.Errorf("report does not say what the audit did: %+v", rep)
	}
	if rep.GPUs[0].AuditPeakBytes < 512*MiB {
		t.Errorf("report audit peak %d, want at least the 512 MiB the driver saw", rep.GPUs[0].AuditPeakBytes)
	}
}

func firstUUID(t *testing.T, d interface{ Client() *client.Client }) string {
	t.Helper()
	g, err := d.Client().GPUs(ctx(t))
	if err != nil || len(g) == 0 {
		t.Fatalf("GPUs: %v", err)
	}
	return g[0].UUID
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
