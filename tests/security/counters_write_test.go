package security

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpuslice/gpuslice/internal/ledger"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A job writes the counters every attached process can write: denials set
// to 1.8e19, its peak to 0, its used to 0. The node's metrics and the job's
// report must not take those figures: denials stay plausible, the peak is
// what the driver saw the job hold.
func TestCountersWriteDecidesNothing(t *testing.T) {
	d := daemon(t, "--recovery-interval", "1h") // no sweep copies the ledger's peak first
	id := session(t, d, "", 0, 512*MiB).ID
	p := startCmd(t, probeCmd(t, "dev:0", "alloc:256M", "pause"), jobEnv(t, d, id))
	p.Expect("paused")

	// Play the job: write the counters file its processes receive (opened
	// here by path, as root, so that this test process is not attached).
	f := counters(t, d, id)
	ctr, err := unix.Mmap(int(f.Fd()), 0, ledger.CountersHdrSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ctr)
	put := func(off int, v uint64) { atomic.StoreUint64((*uint64)(unsafe.Pointer(&ctr[off])), v) }
	// Let the audit see the process hold its 256 MiB, then lie.
	passes := func() float64 {
		f, _ := strconv.ParseFloat(metric(t, d, `gpuslice_audit_passes_total{result="ok"}`), 64)
		return f
	}
	start := passes()
	probe.Eventually(t, 20*time.Second, "two audit passes", func() (bool, string) { return passes() >= start+2, "" })
	put(ledger.CtrOffGPU+ledger.CtrGPUOffDenied, 18_000_000_000_000_000_000)
	put(ledger.CtrOffGPU+ledger.CtrGPUOffPeak, 0)
	put(ledger.CtrOffGPU+ledger.CtrGPUOffUsed, 0)

	uuid := firstUUID(t, d)
	v := metric(t, d, `gpuslice_allocation_denials_total{gpu="0",uuid="`+uuid+`"}`)
	if f, err := strconv.ParseFloat(v, 64); err != nil || f > 1e9 {
		t.Errorf("gpuslice_allocation_denials_total = %q after the job wrote 1.8e19 into its counters", v)
	}
	p.Send("")
	p.Wait()
	probe.Eventually(t, 10*time.Second, "report", func() (bool, string) {
		r, err := d.Client().DeleteSession(ctx(t), id)
		if err == nil {
			if r.GPUs[0].PeakBytes < 256*MiB {
				t.Errorf("report peak %d bytes; the job held 256 MiB", r.GPUs[0].PeakBytes)
			}
			if r.GPUs[0].Denied > 1e9 {
				t.Errorf("report denied %d", r.GPUs[0].Denied)
			}
		}
		return err == nil, errString(err)
	})
	if !d.Running() {
		t.Fatal("gpusliced died")
	}
}
