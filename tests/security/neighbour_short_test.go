package security

import (
	"syscall"
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

// The same, with a neighbour that exits as soon as the driver refuses it
// (what a framework does with an out-of-memory error it cannot handle),
// and a gpusliced too busy to read its SHORT before the process is gone:
// here gpusliced is stopped (SIGSTOP) from before the refusal until the
// neighbour has exited and been reaped. The refusal still stops the
// bypassing process, long before the next periodic pass (an hour away),
// and the neighbour's next process gets the memory its quota promised.
func TestNeighbourRefusedThenExitedTriggersAudit(t *testing.T) {
	needRoot(t)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, Devices: "1GiB", RecoveryInterval: 100 * time.Millisecond,
		ExtraArgs: []string{"--audit-interval", "1h"}})
	session(t, d, "4246", 0, 256*MiB)
	neighbour := session(t, d, "", 0, 512*MiB).ID
	bad := stepd(t, "4246", d.Env(), "", gsProbe(t), "dev:0", "alloc:700M", "pause")
	bad.Expect("paused")

	// Attached (its first allocation), then refused 400 MiB once
	// gpusliced is stopped, and gone.
	p := startCmd(t, probeCmd(t, "dev:0", "alloc:1M", "pause", "alloc:400M"), jobEnv(t, d, neighbour))
	p.Expect("paused")
	pid := d.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	p.Send("")
	p.Wait()
	resume()
	if rc := p.Result().Find(t, "alloc", 1).Get("rc"); rc != "2" {
		t.Fatalf("the neighbour's 400 MiB: rc=%s, want 2 (out of memory: the GPU was short)\n%s", rc, p.Output())
	}
	select {
	case <-bad.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the process holding 700 MiB in a 256 MiB job was not stopped after its neighbour was refused memory and exited\n%s\n%s",
			p.Output(), d.Log())
	}
	again := startCmd(t, probeCmd(t, "dev:0", "alloc:400M"), jobEnv(t, d, neighbour))
	again.Wait()
	if rc := again.Result().Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Errorf("the neighbour's next process after the audit: rc=%s, want 0\n%s", rc, again.Output())
	}
}
