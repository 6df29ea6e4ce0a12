package session

import (
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/daemon/audit"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// driverPass runs one audit read of driver memory as the audit loop does:
// Mark, then during reads the driver's figure (the caller's step, which
// may change the process's charges as a running process does), then Charge.
func driverPass(d *driverMemory, session string, pid uint32, during func() uint64) {
	d.Begin()
	d.Mark()
	bytes := during()
	d.Charge([]audit.Attributed{{Sample: audit.Sample{PID: pid, GPU: 0, Bytes: bytes}, Session: session}})
	d.Settle()
}

// A process allocates and frees between the audit's reads of its charges:
// the hooks' figure before and after the driver's read is the same, the
// driver's figure in between held one more block. That block is not
// memory the driver holds beyond the charges: charged, it stays on the
// slot (a reservation it denies, a reclaim that counts it) until a read
// shows less. Two such reads in a row (what a process that allocates and
// frees all the time gives) once charged it. And a process's reclaim
// once counted the driver memory charged to it as bytes reclaimed from a
// process that died holding memory (every process on a GPU holds some).
func TestDriverMemoryIgnoresChargesBetweenReads(t *testing.T) {
	f := newFixture(t, "")
	if _, _, err := f.m.Create(api.SessionRequest{ID: "s", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	child, slot := f.attachChild(t, "s")
	pid := uint32(child.Process.Pid)
	l, err := ledger.Open(filepath.Join(f.dir, "ledgers"), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const base, block, module = 64 << 20, 134303, 8 << 20
	if err := l.Reserve(slot, 0, base); err != nil {
		t.Fatal(err)
	}
	d := f.m.DriverMemory().(*driverMemory)
	churn := func(extra uint64) func() uint64 {
		return func() uint64 {
			if err := l.Reserve(slot, 0, block); err != nil {
				t.Fatal(err)
			}
			defer l.Release(slot, 0, block)
			return base + block + extra // the driver's figure while the block is allocated
		}
	}
	for pass := 0; pass < 3; pass++ {
		driverPass(d, "s", pid, churn(0))
		if c := l.Driver(0); c != 0 {
			t.Fatalf("pass %d: %d bytes charged as driver memory, want 0 (the block was charged by its hook)", pass, c)
		}
	}
	if u := l.SlotUsed(slot, 0); u != base {
		t.Errorf("slot holds %d, want %d", u, uint64(base))
	}
	// Quiet reads: memory the driver holds beyond the charges is charged
	// once two reads agree.
	quiet := func() uint64 { return base + module }
	driverPass(d, "s", pid, quiet)
	driverPass(d, "s", pid, quiet)
	if c := l.Driver(0); c != module {
		t.Errorf("after two quiet reads: %d bytes charged as driver memory, want %d", c, uint64(module))
	}
	// Churn on top of it charges nothing more, and takes nothing back.
	driverPass(d, "s", pid, churn(module))
	driverPass(d, "s", pid, churn(module))
	if c := l.Driver(0); c != module {
		t.Errorf("after churning reads: %d bytes charged as driver memory, want %d", c, uint64(module))
	}

	// The process dies holding its base: that is reclaimed, the driver
	// memory the daemon charged it goes back without being counted so.
	child.Process.Kill()
	child.Wait()
	f.m.Sweep()
	if u := l.Used(0); u != 0 {
		t.Errorf("used after the process's reclaim: %d, want 0", u)
	}
	if r := l.Reclaimed(0); r != base {
		t.Errorf("ledger counts %d bytes reclaimed, want %d (what the process held, not its driver memory)", r, uint64(base))
	}
	rep, err := f.m.Delete("s")
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.GPUs[0].ReclaimedBytes; r != base {
		t.Errorf("report: %d bytes reclaimed, want %d", r, uint64(base))
	}
}
