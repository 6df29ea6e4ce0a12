package session

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// What a session may still take on a GPU: its quota less the larger of
// its ledger's used count and what the last audit pass found it holding;
// a pass that did not see the session leaves the ledger's count alone.
func TestUnused(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "s", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	uuid := gpus[1].UUID
	check := func(what string, want uint64) {
		t.Helper()
		got, g, ok := f.m.Unused("s", uuid)
		if !ok || g != 1 || got != want {
			t.Fatalf("%s: Unused = %d, GPU %d, %v; want %d, GPU 1", what, got, g, ok, want)
		}
	}
	check("a new session", 1<<30)
	_, slot := f.attachChild(t, "s")
	l, err := ledger.Open(filepath.Join(f.dir, "ledgers"), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reserve(slot, 1, 100<<20); err != nil {
		t.Fatal(err)
	}
	check("100 MiB counted used", 1<<30-100<<20)
	f.m.ObserveAudit(map[string]map[int]uint64{"s": {1: 600 << 20}})
	check("a pass found 600 MiB", 1<<30-600<<20)
	f.m.ObserveAudit(map[string]map[int]uint64{"s": {1: 2 << 30}})
	check("a pass found 2 GiB", 0)
	f.m.ObserveAudit(nil)
	check("a pass that did not see it", 1<<30-100<<20)
	if _, _, ok := f.m.Unused("s", "GPU-cccccccc-0000-0000-0000-000000000000"); ok {
		t.Fatal("Unused on a GPU the node does not have: ok")
	}
	if _, _, ok := f.m.Unused("none", uuid); ok {
		t.Fatal("Unused of a session that does not exist: ok")
	}
}

// A process attached to a session that exits is found by ExitedProcess
// (for its session's uid, and root) once AttachedProcess finds it no
// more.
func TestExitedProcess(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "s", UID: 4321, QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	child, slot := f.attachChild(t, "s")
	pid := uint32(child.Process.Pid)
	if k, ok := f.m.AttachedProcess(4321, pid); !ok || k.Slot != slot {
		t.Fatalf("AttachedProcess of the live child: %+v %v", k, ok)
	}
	if _, ok := f.m.ExitedProcess(4321, pid); ok {
		t.Fatal("ExitedProcess found the live child")
	}
	child.Process.Kill()
	child.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, ok := f.m.ExitedProcess(4321, pid)
		if ok {
			if k.Session != "s" || k.Slot != slot || k.PID != pid {
				t.Fatalf("ExitedProcess: %+v; want session s, slot %d, pid %d", k, slot, pid)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's exit was not recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := f.m.AttachedProcess(4321, pid); ok {
		t.Fatal("AttachedProcess still finds the exited child")
	}
	if _, ok := f.m.ExitedProcess(0, pid); !ok {
		t.Fatal("ExitedProcess for root: not found")
	}
	if _, ok := f.m.ExitedProcess(4322, pid); ok {
		t.Fatal("ExitedProcess for another uid: found")
	}
}
