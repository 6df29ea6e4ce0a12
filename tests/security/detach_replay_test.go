package security

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/ledger"
)

// A process charges memory, then sends DETACH for its own slot (no
// shared-memory write needed) hoping to be given its bytes back while the
// memory is still allocated. The charge stays, so the quota holds.
func TestDetachReplayKeepsCharge(t *testing.T) {
	d := daemon(t)
	id := session(t, d, "", 0, GiB).ID
	conn, a := attachTo(t, d, id)
	l, err := ledger.Map(a.Limits, a.Counters)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reserve(int(a.Slot), 0, 768*MiB); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		conn.Detach(a.Slot) // whatever the answer, nothing may be given back
	}
	if got := used(t, d, id); got != 768*MiB {
		t.Fatalf("after DETACH the daemon counts %d bytes, want the 768 MiB still allocated", got)
	}
	if err := l.Reserve(int(a.Slot), 0, 512*MiB); err == nil {
		t.Fatal("512 MiB more admitted on top of 768 MiB under a 1 GiB quota")
	}
}
