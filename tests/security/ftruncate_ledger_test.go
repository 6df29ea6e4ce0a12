package security

import (
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A process truncates (or grows) the counters fd it received at ATTACH.
// Before sealing, that made the root daemon die of SIGBUS the next time it
// touched the ledger (when the process exited), and again after every
// restart. The daemon must stay up and keep serving, and the ledger keep
// its size.
func TestFtruncateLedgerDaemonSurvives(t *testing.T) {
	d := daemon(t)
	id := session(t, d, "", 0, GiB).ID
	p := startCmd(t, probeCmd(t, "dev:0", "alloc:64M", "pause"), jobEnv(t, d, id))
	p.Expect("paused")

	conn, err := ipc.Dial(d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	a, err := conn.Attach(id, "")
	if err != nil {
		t.Fatal(err)
	}
	fd := int(a.Counters.Fd())
	var before unix.Stat_t
	unix.Fstat(fd, &before)
	for _, size := range []int64{0, 4096, before.Size * 4} {
		unix.Ftruncate(fd, size) // the attack; its result does not matter
	}
	var after unix.Stat_t
	unix.Fstat(fd, &after)
	if after.Size != before.Size {
		t.Errorf("counters file went from %d to %d bytes", before.Size, after.Size)
	}
	a.Close()
	conn.Close()

	// The job's process exits: the daemon reclaims from the ledger.
	p.Send("")
	p.Wait()
	probe.Eventually(t, 10*time.Second, "reclaim", func() (bool, string) {
		return used(t, d, id) == 0, "used " + itoa(used(t, d, id))
	})
	d.Restart()
	q := startCmd(t, probeCmd(t, "dev:0", "alloc:64M"), jobEnv(t, d, id))
	q.Wait()
	if rc := q.Result().Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Fatalf("allocation after the attack and a restart: rc=%s\n%s", rc, q.Output())
	}
	if !d.Running() {
		t.Fatalf("gpusliced died:\n%s", d.Log())
	}
}
