package compute

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// stepClock steps the wall clock the node's NVML stamps its samples with
// (fc_clockstep: fakecuda's; one kernel serves every node of the tests).
func stepClock(t *testing.T, d *testenv.Daemon, secs string) {
	t.Helper()
	cmd := exec.Command(program(t, "fc_clockstep"), secs)
	cmd.Env = d.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fc_clockstep %s: %v: %s", secs, err, out)
	}
	t.Logf("node's clock stepped by %s s: %s", secs, strings.TrimSpace(string(out)))
}

// NVIDIA's driver stamps each utilisation sample with the host's wall
// clock, and gpusliced reads on from the newest stamp it has seen. When
// the node's clock is stepped back (NTP correcting a clock that ran fast,
// `date -s`), every new sample is older than that stamp: NVML answers
// NOT_FOUND, and no share was held until the clock caught up again (the
// length of the step). Stepped forward, the first window after it spans
// the whole step. Sessions of 25 and 75 keep their shares through both.
func TestSharesHoldThroughClockStep(t *testing.T) {
	for _, step := range []string{"-90.37", "3600.21"} {
		t.Run(step, func(t *testing.T) {
			d := startDaemon(t)
			session(t, d, "a", 8<<30, percent(25, 0))
			session(t, d, "b", 8<<30, percent(75, 0))
			jobs := []*job{launch(t, d, "a"), launch(t, d, "b")}
			settle()
			expectShares(t, d, "weights 25/75 before the step", []float64{25, 75}, jobs...)
			stepClock(t, d, step)
			time.Sleep(3 * time.Second) // what gpusliced may take to see the step
			expectShares(t, d, "weights 25/75 after the node's clock stepped by "+step+" s", []float64{25, 75}, jobs...)
			expectNoFreeze(t, d)
		})
	}
}
