package nvidia

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestRuntimeCublas runs cublas_probe (NVIDIA's libcublas.so.11 and
// libcudart.so.11.0): cublasCreate, device vectors, cublasSetVector and
// cublasGetVector, cublasDestroy, on fakecuda and under a quota.
func TestRuntimeCublas(t *testing.T) {
	probe := rtProbe(t, "cublas_probe")
	size := fmt.Sprint(rtChunk)
	row := rtCompatRow{Program: rtProgramCublas,
		Note: "handle, device vectors, cublasSetVector/cublasGetVector; no kernel runs on fakecuda (GEMM answers CUBLAS_STATUS_NOT_SUPPORTED)"}
	defer func() { rtRecord(t, row) }()

	t.Run("fakecuda", func(t *testing.T) {
		r := rtRun(t, rtPlainEnv(t, "80GiB"), probe, size)
		rtCheckLoaded(t, r)
		ok := rtCheckCublas(t, r, 80*rtGiB)
		if got := r.get("alloc_second"); got != "0" {
			t.Errorf("a second %d-byte vector on an 80 GiB GPU gave %s", rtChunk, got)
			ok = false
		}
		row.Runs = ok && !t.Failed()
	})

	t.Run("quota", func(t *testing.T) {
		d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB"})
		r := rtGpuslice(t, d, nil, fmt.Sprintf("%dM", rtQuota/rtMiB), probe, size)
		rtCheckLoaded(t, r)
		if !strings.Contains(strings.Join(r.kv["mapped"], "\n"), "/libgpuslice.so") {
			t.Errorf("the interceptor is not mapped in the process; mapped: %q", r.kv["mapped"])
		}
		shows := rtCheckCublas(t, r, rtQuota)
		enforced := r.get("alloc_second") == rtOOM
		if !enforced {
			t.Errorf("a second %d-byte vector past a %d-byte quota gave %q, want %s (cudaErrorMemoryAllocation)",
				rtChunk, rtQuota, r.get("alloc_second"), rtOOM)
		}
		row.QuotaEnforced = enforced && r.code == 0
		row.QueriesShowQuota = shows && !t.Failed()
	})
}

// rtCheckCublas checks what cublas_probe reports on a GPU that shows total
// bytes; true when the queries were consistent with it.
func rtCheckCublas(t *testing.T, r rtResult, total uint64) bool {
	t.Helper()
	if r.code != 0 || r.get("done") != "1" {
		t.Errorf("cublas_probe exited %d (done=%q)\nstdout:\n%s\nstderr:\n%s", r.code, r.get("done"), r.stdout, r.stderr)
		return false
	}
	for _, k := range []string{"create", "alloc_first", "set_vector", "get_vector", "destroy"} {
		if got := r.get(k); got != "0" {
			t.Errorf("%s gave %s", k, got)
		}
	}
	if got := r.get("vector"); got != "ok" {
		t.Errorf("a vector did not survive cublasSetVector/cublasGetVector: %s", got)
	}
	ok := true
	for _, when := range []string{"created", "held", "freed"} {
		if got := r.uint(t, "meminfo_"+when+"_total"); got != total {
			t.Errorf("cudaMemGetInfo total (%s) = %d, want %d", when, got, total)
			ok = false
		}
	}
	created := r.uint(t, "meminfo_created_free")
	if created >= total || created < total-rtChunk/2 {
		t.Errorf("cudaMemGetInfo free after cublasCreate = %d of %d: the handle's workspace should show, and be small", created, total)
		ok = false
	}
	if got := r.uint(t, "meminfo_held_free"); got != created-rtChunk {
		t.Errorf("cudaMemGetInfo free with a %d-byte vector held = %d, want %d", rtChunk, got, created-rtChunk)
		ok = false
	}
	if got := r.uint(t, "meminfo_freed_free"); got != created {
		t.Errorf("cudaMemGetInfo free after freeing the vectors = %d, want %d", got, created)
		ok = false
	}
	return ok
}
