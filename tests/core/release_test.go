package core

import (
	"encoding/binary"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// storeCounter writes v at byte offset off of the session's counters file
// (root, by path), the way a reclaim or re-base by the daemon changes the
// counters under a live process.
func storeCounter(t *testing.T, d *testenv.Daemon, id string, off int, v uint64) {
	t.Helper()
	_, ctrPath := ledger.Paths(d.LedgerDir, id)
	f, err := os.OpenFile(ctrPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open counters: %v", err)
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	if _, err := f.WriteAt(b[:], int64(off)); err != nil {
		t.Fatalf("write counters: %v", err)
	}
}

// A release after the session's used counter was zeroed under the process
// (the daemon re-based it) floors at 0 instead of wrapping: the session
// stays usable, and a new allocation within the quota is admitted. (The
// process's own slot is never touched by the daemon while it lives.)
func TestReleaseAfterRebaseDoesNotWrap(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	tests := []struct {
		name  string
		steps []string // allocate, then (after the counters are zeroed) free
	}{
		{"cuMemFree_v2", []string{"alloc:600M"}},
		{"cuMemFreeAsync", []string{"async:600M"}},
		{"cuMemRelease", []string{"vmm:600M"}},
		{"cuArrayDestroy", []string{"array:153600:1024"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"dev:0"}, tc.steps...)
			// (a pool keeps what is freed into it until a synchronisation)
			args = append(args, "pid", "pause", "free", "sync", "alloc:900M", "pause", "freeall")
			p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), args...)
			pid := int(p.Expect("pid").Int(t, "pid"))
			p.Expect("paused")
			slot := -1
			for _, s := range l.Attached() {
				if int(s.PID) == pid {
					slot = s.Index
				}
			}
			if slot < 0 || l.Used(0) != 600*MiB {
				t.Fatalf("slot %d used %d before the re-base\n%s", slot, l.Used(0), p.Output())
			}
			storeCounter(t, d, sess.ID, ledger.CtrOffGPU+ledger.CtrGPUOffUsed, 0)
			p.Send("")
			p.Expect("free")
			a := p.Expect("alloc")
			p.Expect("paused")
			used := l.Used(0)
			slotUsed, _ := slotOf(t, l, pid)
			p.Send("")
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			if a.Get("rc") != "0" {
				t.Errorf("allocation after the release: %s, want rc=0 (used %d)", a.Line, used)
			}
			if used != 900*MiB || len(slotUsed) == 0 || slotUsed[0] != 900*MiB {
				t.Errorf("after free + 900 MiB: used %d, slot %v; want 900 MiB in both", used, slotUsed)
			}
			// the process freed everything before it exited
			probe.Eventually(t, 30*time.Second, "used back to 0", func() (bool, string) {
				return l.Used(0) == 0, strconv.FormatUint(l.Used(0), 10)
			})
		})
	}
}
