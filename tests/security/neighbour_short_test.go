package security

import (
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// A job's process that bypasses the interceptor holds more than its
// quota; a neighbour on the same GPU is then refused by the driver memory
// its own quota promised. The neighbour's interceptor tells gpusliced
// (SHORT), which audits at once: with an audit interval of an hour, the
// bypassing process is stopped only because the neighbour was refused,
// and the neighbour's next allocation succeeds.
func TestNeighbourRefusedTriggersAudit(t *testing.T) {
	needRoot(t)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, Devices: "1GiB", RecoveryInterval: 100 * time.Millisecond,
		ExtraArgs: []string{"--audit-interval", "1h"}})
	session(t, d, "4245", 0, 256*MiB)
	neighbour := session(t, d, "", 0, 512*MiB).ID
	bad := stepd(t, "4245", d.Env(), "", gsProbe(t), "dev:0", "alloc:700M", "pause")
	bad.Expect("paused")

	p := startCmd(t, probeCmd(t, "dev:0", "alloc:400M", "pause", "alloc:400M", "pause"), jobEnv(t, d, neighbour))
	p.Expect("paused")
	select {
	case <-bad.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the process holding 700 MiB in a 256 MiB job was not stopped after its neighbour was refused memory\n%s\n%s",
			p.Output(), d.Log())
	}
	p.Send("")
	p.Expect("paused")
	r := p.Result()
	if rc := r.Find(t, "alloc", 0).Get("rc"); rc != "2" {
		t.Errorf("first allocation of the neighbour: rc=%s, want 2 (out of memory: the GPU was short)\n%s", rc, p.Output())
	}
	if rc := r.Find(t, "alloc", 1).Get("rc"); rc != "0" {
		t.Errorf("the neighbour's allocation after the audit: rc=%s, want 0\n%s", rc, p.Output())
	}
	p.Send("")
	p.Wait()
}
