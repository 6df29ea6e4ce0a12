package ledger

import (
	"sync/atomic"
	"testing"
)

// SlotOf finds a claimed slot by the daemon's record of pids: a job that
// writes another pid into its slot does not make that pid attached, and a
// reclaimed slot is found no more.
func TestSlotOf(t *testing.T) {
	d, err := Create(t.TempDir(), "s", testGPUs(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	i, _, err := d.Claim(100, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	if slot, start, ok := d.SlotOf(100); !ok || slot != i || start != 7 {
		t.Fatalf("SlotOf(100) = %d, %d, %v; want %d, 7, true", slot, start, ok, i)
	}
	if _, _, ok := d.SlotOf(101); ok {
		t.Fatal("SlotOf found a pid that never attached")
	}
	atomic.StoreUint32(u32(d.ctr, d.slot(i, SlotOffPID)), 555) // written by the job
	if _, _, ok := d.SlotOf(555); ok {
		t.Fatal("a pid the job wrote into its slot counts as attached")
	}
	d.Reclaim(i, nil)
	if _, _, ok := d.SlotOf(100); ok {
		t.Fatal("SlotOf found a reclaimed slot")
	}
}
