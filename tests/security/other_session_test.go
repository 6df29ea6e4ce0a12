package security

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A job's process that names another session of its user
// (GPUSLICE_SESSION=otherjob, e.g. a larger one) still gets its own job's
// quota: the environment does not decide which job a process belongs to.
func TestOtherSessionIgnored(t *testing.T) {
	d := daemon(t)
	u := uidOf(t, "gsltest1")
	session(t, d, "4243", u, 256*MiB)
	session(t, d, "9999", u, 8*GiB)
	p := stepd(t, "4243", jobEnv(t, d, "9999"), "gsltest1", gsProbe(t), "dev:0", "alloc:200M", "alloc:200M")
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, p.Output())
	}
	if rc := p.Result().Find(t, "alloc", 1).Get("rc"); rc != "2" {
		t.Errorf("second 200 MiB allocation in job 4243 (256 MiB) naming session 9999 (8 GiB): rc=%s, want 2\n%s", rc, p.Output())
	}
	if got := used(t, d, "9999"); got != 0 {
		t.Errorf("session 9999 was charged %d bytes by another job's process", got)
	}
	// The process exited holding its 200 MiB: gpusliced reclaims them when
	// its exit watcher sees the exit, a moment after the test's wait
	// returns (checked at once, a loaded machine lost that race).
	probe.Eventually(t, 5*time.Second, "job 4243's 200 MiB reclaimed after its process exited", func() (bool, string) {
		got := used(t, d, "4243")
		return got == 0, fmt.Sprintf("job 4243 counts %d bytes", got)
	})
}
