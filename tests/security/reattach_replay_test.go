package security

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/ledger"
)

// A process charges memory, then sends ATTACH again from the same pid
// (which an exec'd new image legitimately does) without having exec'd,
// hoping its slot is emptied. The charge stays: the quota holds.
func TestReattachReplayKeepsCharge(t *testing.T) {
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
		b, err := conn.Attach(id, "")
		if err != nil {
			t.Fatalf("second attach: %v", err)
		}
		b.Close()
	}
	if got := used(t, d, id); got != 768*MiB {
		t.Fatalf("after a second ATTACH the daemon counts %d bytes, want the 768 MiB still allocated", got)
	}
	if err := l.Reserve(int(a.Slot), 0, 512*MiB); err == nil {
		t.Fatal("512 MiB more admitted on top of 768 MiB under a 1 GiB quota")
	}
}
