package security

import (
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The audit must never take honest work for an overrun: 16 processes x 4
// threads allocating and freeing against a 1 GiB quota, audited every
// 10 ms with the kill policy, lose no process and record no overrun.
func TestStormNoAuditFalsePositive(t *testing.T) {
	d := daemon(t, "--audit-interval", "10ms")
	id := session(t, d, "", 0, GiB).ID
	env := jobEnv(t, d, id)
	var procs []*procT
	for i := 0; i < 16; i++ {
		p := startCmd(t, probeCmdNamed(t, "gs_storm", "4", strconv.FormatUint(MiB, 10), strconv.FormatUint(64*MiB, 10), "8"), env)
		p.Expect("ready")
		procs = append(procs, p)
	}
	passes := func() float64 {
		f, _ := strconv.ParseFloat(metric(t, d, `gpuslice_audit_passes_total{result="ok"}`), 64)
		return f
	}
	start := passes()
	probe.Eventually(t, 60*time.Second, "100 audit passes during the storm", func() (bool, string) {
		return passes() >= start+100, ""
	})
	var denied uint64
	for _, p := range procs {
		p.Send("stop")
		done := p.Expect("done")
		denied += done.Uint(t, "denied")
		if err := p.Wait(); err != nil {
			t.Errorf("storm process: %v (killed by the audit?)", err)
		}
	}
	if denied == 0 {
		t.Error("the storm never pressed against the quota")
	}
	uuid := firstUUID(t, d)
	if v := metric(t, d, `gpuslice_audit_overruns_total{gpu="0",uuid="`+uuid+`"}`); v != "0" {
		t.Errorf("gpuslice_audit_overruns_total = %s during an honest storm", v)
	}
}
