package nvidia

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

const (
	rtMiB = uint64(1) << 20
	rtGiB = uint64(1) << 30
	// Each allocation kind asks twice for rtChunk bytes; under rtQuota the
	// first fits and the second must be refused.
	rtChunk = 48 * rtMiB
	rtQuota = 64 * rtMiB
	// cudaErrorMemoryAllocation
	rtOOM = "2"
)

// The allocation kinds cudart_probe exercises, by the prefix of its keys.
var rtKinds = []string{"malloc", "pitch", "managed", "async", "array"}

// TestRuntimeProbe runs cudart_probe (gcc, NVIDIA's CUDA 11.8 headers,
// NVIDIA's libcudart.so.11.0) on fakecuda, then under `gpuslice run --gpu-mem`
// with the real gpusliced and the interceptor preloaded, and records the
// result in build/compat/runtime.jsonl.
func TestRuntimeProbe(t *testing.T) {
	probe := rtProbe(t, "cudart_probe")
	size := fmt.Sprint(rtChunk)
	row := rtCompatRow{Program: rtProgramRuntime,
		Note: "cudaMalloc, cudaMallocPitch, cudaMallocManaged, cudaMallocAsync, cudaMallocArray refused past the quota; cudaMemGetInfo and cudaGetDeviceProperties show it; kernels do not run on fakecuda"}
	defer func() { rtRecord(t, row) }()

	t.Run("fakecuda", func(t *testing.T) {
		r := rtRun(t, rtPlainEnv(t, "80GiB"), probe, size)
		rtCheckLoaded(t, r)
		ok := rtCheckRuns(t, r, 80*rtGiB)
		for _, k := range rtKinds {
			if r.get(k+"_second") != "0" {
				t.Errorf("%s: a second %d-byte allocation on an 80 GiB GPU failed: %s %s", k, rtChunk,
					r.get(k+"_second"), r.get(k+"_second_error"))
				ok = false
			}
		}
		row.Runs = ok && !t.Failed()
		if !row.Runs {
			row.Note = "fails on fakecuda; see the test log"
		}
	})

	// Several GPUs, renumbered by CUDA_VISIBLE_DEVICES: the runtime's check of
	// the driver covers every visible device, and device 0 is physical 2.
	t.Run("visible devices", func(t *testing.T) {
		env := append(rtPlainEnv(t, "2x80GiB,40GiB"), "CUDA_VISIBLE_DEVICES=2,0")
		r := rtRun(t, env, probe, size)
		rtCheckLoaded(t, r)
		if got := r.get("device_count"); got != "2" {
			t.Errorf("cudaGetDeviceCount = %s with CUDA_VISIBLE_DEVICES=2,0, want 2", got)
		}
		if got := r.uint(t, "prop_total"); got != 40*rtGiB {
			t.Errorf("device 0 (physical 2) totalGlobalMem = %d, want 40 GiB", got)
		}
		rtCheckRuns(t, r, 40*rtGiB)
	})

	// under a quota; extra is added to the job's environment
	quota := func(t *testing.T, extra ...string) (enforced, shows bool) {
		d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB"})
		r := rtGpuslice(t, d, extra, fmt.Sprintf("%dM", rtQuota/rtMiB), probe, size)
		rtCheckLoaded(t, r)
		if !strings.Contains(strings.Join(r.kv["mapped"], "\n"), "/libgpuslice.so") {
			t.Errorf("the interceptor is not mapped in the process; mapped: %q", r.kv["mapped"])
		}
		rtCheckRuns(t, r, rtQuota)
		enforced = true
		for _, k := range rtKinds {
			if got := r.get(k + "_first"); got != "0" {
				t.Errorf("%s: %d bytes under a %d-byte quota were refused: %s %s", k, rtChunk, rtQuota, got,
					r.get(k+"_first_error"))
				enforced = false
			}
			if got := r.get(k + "_second"); got != rtOOM {
				t.Errorf("%s: a second %d bytes past a %d-byte quota gave %q (%s), want %s (cudaErrorMemoryAllocation)",
					k, rtChunk, rtQuota, got, r.get(k+"_second_error"), rtOOM)
				enforced = false
			}
		}
		shows = true
		if got := r.uint(t, "prop_total"); got != rtQuota {
			t.Errorf("cudaGetDeviceProperties totalGlobalMem = %d under the quota, want %d", got, rtQuota)
			shows = false
		}
		if r.code != 0 {
			t.Errorf("gpuslice run exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			enforced = false
		}
		return enforced, shows && !t.Failed()
	}
	t.Run("quota", func(t *testing.T) {
		row.QuotaEnforced, row.QueriesShowQuota = quota(t)
	})
	// NVIDIA's runtime takes every driver entry point from cuGetProcAddress:
	// a driver answering with private entry points (none exported) is held
	// to the quota the same way
	t.Run("quota, private entry points", func(t *testing.T) {
		quota(t, "FAKECUDA_PROCADDR=private")
	})
	if row.Runs && !(row.QuotaEnforced && row.QueriesShowQuota) {
		row.Note = "quota not fully applied; see the test log"
	}
}

// rtCheckRuns checks what cudart_probe reports on a GPU that shows total
// bytes: every call that must work worked, copies kept their bytes, and every
// cudaMemGetInfo is consistent with what the probe held at that moment.
func rtCheckRuns(t *testing.T, r rtResult, total uint64) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	if r.code != 0 || r.get("done") != "1" {
		fail("cudart_probe exited %d (done=%q)\nstdout:\n%s\nstderr:\n%s", r.code, r.get("done"), r.stdout, r.stderr)
		return false
	}
	if got := r.get("runtime_version"); got != "11080" {
		fail("cudaRuntimeGetVersion = %s, want 11080 (NVIDIA's runtime 11.8)", got)
	}
	if got := r.get("copy"); got != "ok" {
		fail("bytes did not survive cudaMemset/cudaMemcpy through device memory: %s", got)
	}
	if got := r.get("event_elapsed_nonnegative"); got != "1" {
		fail("cudaEventElapsedTime between two recorded events is negative")
	}
	meminfo := func(when string, wantFree uint64) {
		t.Helper()
		if got := r.uint(t, "meminfo_"+when+"_total"); got != total {
			fail("cudaMemGetInfo total (%s) = %d, want %d", when, got, total)
		}
		if got := r.uint(t, "meminfo_"+when+"_free"); got != wantFree {
			fail("cudaMemGetInfo free (%s) = %d, want %d", when, got, wantFree)
		}
	}
	meminfo("start", total)
	for _, k := range rtKinds {
		if got := r.get(k + "_first"); got != "0" {
			fail("%s: allocating %d bytes gave %s (%s)", k, rtChunk, got, r.get(k+"_first_error"))
			continue
		}
		meminfo(k+"_held", total-rtChunk)
		meminfo(k+"_after", total)
	}
	meminfo("before_reset", total-rtChunk)
	meminfo("after_reset", total)
	if got := r.get("reset_malloc_again"); got != "0" {
		fail("cudaMalloc after cudaDeviceReset gave %s", got)
	}
	return ok
}
