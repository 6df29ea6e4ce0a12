package reclaim

import (
	"testing"
	"time"
)

// The record of exits answers for ExitGrace, keeps a pid's last exit,
// and stays within exitsMax however many processes exit.
func TestExitLog(t *testing.T) {
	var l exitLog
	t0 := time.Unix(1000, 0)
	k := func(pid uint32, start uint64) Key { return Key{Session: "s", Slot: 1, PID: pid, StartTime: start} }
	l.add(k(10, 1), t0)
	l.add(k(11, 1), t0.Add(time.Second))
	if got, ok := l.find(10, t0.Add(ExitGrace-time.Millisecond)); !ok || got != k(10, 1) {
		t.Fatalf("pid 10 just within the grace: %v %v", got, ok)
	}
	if _, ok := l.find(10, t0.Add(ExitGrace)); ok {
		t.Fatal("pid 10 found after the grace")
	}
	if _, ok := l.find(11, t0.Add(ExitGrace)); !ok {
		t.Fatal("pid 11, which exited a second later, not found")
	}
	// A pid that exits again (reused) answers with its last exit, and
	// the earlier entry's expiry does not take it.
	l.add(k(11, 2), t0.Add(ExitGrace+500*time.Millisecond))
	if got, ok := l.find(11, t0.Add(time.Second+ExitGrace)); !ok || got != k(11, 2) {
		t.Fatalf("pid 11 after the first entry's expiry: %v %v; want its second exit", got, ok)
	}
	// A storm of exits keeps the last exitsMax.
	at := t0.Add(10 * time.Second)
	for i := 0; i < 3*exitsMax; i++ {
		l.add(k(uint32(100000+i), 1), at)
	}
	if len(l.q) != exitsMax || len(l.byPID) != exitsMax {
		t.Fatalf("after %d exits: %d queued, %d by pid; want %d", 3*exitsMax, len(l.q), len(l.byPID), exitsMax)
	}
	if _, ok := l.find(uint32(100000+3*exitsMax-1), at); !ok {
		t.Fatal("the last exit of the storm not found")
	}
	if _, ok := l.find(100000, at); ok {
		t.Fatal("the first exit of the storm still found past exitsMax")
	}
	if _, ok := l.find(100000+3*exitsMax-1, at.Add(ExitGrace)); ok || len(l.byPID) != 0 || l.q != nil {
		t.Fatalf("after the grace: %d by pid, %d queued; want none", len(l.byPID), len(l.q))
	}
}
