package security

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A job holds 256 MiB, frees it and writes 0 into its peak counter before
// it ends. Where the driver gives no per-process figures (NVML's
// "not available", as in some VMs and containers) no audit sample sees
// the memory; the daemon's own readings of the ledger during its audit
// passes did. The job's report (and so sacct) must show the 256 MiB.
func TestZeroedPeakStillReported(t *testing.T) {
	needRoot(t)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, RecoveryInterval: time.Hour,
		ExtraEnv:  []string{"FAKECUDA_NVML_PROCESS_MEMORY=unavailable"},
		ExtraArgs: []string{"--audit-interval", "50ms"}})
	id := session(t, d, "", 0, 512*MiB).ID
	p := startCmd(t, probeCmd(t, "dev:0", "alloc:256M", "pause", "freeall", "pause"), jobEnv(t, d, id))
	p.Expect("paused")
	passes := func() float64 {
		f, _ := strconv.ParseFloat(metric(t, d, `gpuslice_audit_passes_total{result="ok"}`), 64)
		return f
	}
	start := passes()
	probe.Eventually(t, 20*time.Second, "three audit passes", func() (bool, string) { return passes() >= start+3, "" })
	p.Send("")
	p.Expect("paused") // freed

	f := counters(t, d, id)
	ctr, err := unix.Mmap(int(f.Fd()), 0, ledger.CountersHdrSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ctr)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&ctr[ledger.CtrOffGPU+ledger.CtrGPUOffPeak])), 0)
	p.Send("")
	p.Wait()
	probe.Eventually(t, 10*time.Second, "report", func() (bool, string) {
		r, err := d.Client().DeleteSession(ctx(t), id)
		if err == nil && r.GPUs[0].PeakBytes < 256*MiB {
			t.Errorf("report peak %d bytes after the job zeroed its peak counter; it held 256 MiB through %v audit passes",
				r.GPUs[0].PeakBytes, passes()-start)
		}
		return err == nil, errString(err)
	})
}
