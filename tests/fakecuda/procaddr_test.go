package fakecuda

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const (
	statusSuccess       = "0"
	statusNotFound      = "1"
	statusNotSufficient = "2"
	resultNotFound      = "500" // CUDA_ERROR_NOT_FOUND
	flagPerThread       = 2     // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
	flagLegacy          = 1     // CU_GET_PROC_ADDRESS_LEGACY_STREAM
)

// cuGetProcAddress_v2 resolves a base name at a CUDA version to the newest
// entry not newer than it, honours the per-thread flag, and reports symbols
// that are too new or unknown.
func TestGetProcAddress(t *testing.T) {
	tests := []struct {
		name    string
		version int
		flags   int
		symbol  string // "-" when nothing is returned
		status  string
	}{
		{"cuMemAlloc", 12060, 0, "cuMemAlloc_v2", statusSuccess},
		{"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", statusSuccess},
		{"cuMemAlloc", 3010, 0, "cuMemAlloc", statusSuccess},
		{"cuMemAlloc", 2000, 0, "cuMemAlloc", statusSuccess},
		{"cuMemAlloc", 1000, 0, "-", statusNotSufficient},
		{"cuMemFree", 12060, flagLegacy, "cuMemFree_v2", statusSuccess},
		{"cuMemGetInfo", 12060, 0, "cuMemGetInfo_v2", statusSuccess},
		{"cuDeviceTotalMem", 12060, 0, "cuDeviceTotalMem_v2", statusSuccess},
		{"cuMemcpyHtoD", 12060, flagPerThread, "cuMemcpyHtoD_v2_ptds", statusSuccess},
		{"cuMemcpyHtoD", 12060, 0, "cuMemcpyHtoD_v2", statusSuccess},
		{"cuMemcpyHtoD", 6050, flagPerThread, "cuMemcpyHtoD_v2", statusSuccess},
		{"cuMemcpy", 7000, flagPerThread, "cuMemcpy_ptds", statusSuccess},
		{"cuMemAllocAsync", 12060, flagPerThread, "cuMemAllocAsync_ptsz", statusSuccess},
		{"cuMemAllocAsync", 12060, 0, "cuMemAllocAsync", statusSuccess},
		{"cuMemAllocAsync", 11010, 0, "-", statusNotSufficient},
		{"cuMemFreeAsync", 11020, flagPerThread, "cuMemFreeAsync_ptsz", statusSuccess},
		{"cuLaunchKernel", 12060, flagPerThread, "cuLaunchKernel_ptsz", statusSuccess},
		{"cuStreamGetCaptureInfo", 12060, flagPerThread, "cuStreamGetCaptureInfo_v3_ptsz", statusSuccess},
		{"cuStreamGetCaptureInfo", 11030, 0, "cuStreamGetCaptureInfo_v2", statusSuccess},
		{"cuCtxCreate", 12060, 0, "cuCtxCreate_v4", statusSuccess},
		{"cuCtxCreate", 11040, 0, "cuCtxCreate_v3", statusSuccess},
		{"cuCtxCreate", 4000, 0, "cuCtxCreate_v2", statusSuccess},
		{"cuCtxDestroy", 12060, 0, "cuCtxDestroy_v2", statusSuccess},
		{"cuDevicePrimaryCtxRelease", 10000, 0, "cuDevicePrimaryCtxRelease", statusSuccess},
		{"cuDeviceGetUuid", 12060, 0, "cuDeviceGetUuid_v2", statusSuccess},
		{"cuDeviceGetUuid", 11000, 0, "cuDeviceGetUuid", statusSuccess},
		{"cuGraphInstantiate", 12060, 0, "cuGraphInstantiateWithFlags", statusSuccess},
		{"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2", statusSuccess},
		{"cuGetProcAddress", 12060, 0, "cuGetProcAddress_v2", statusSuccess},
		{"cuGetProcAddress", 11030, 0, "cuGetProcAddress", statusSuccess},
		{"cuGetProcAddress", 11020, 0, "-", statusNotSufficient},
		{"cuMemCreate", 12060, 0, "cuMemCreate", statusSuccess},
		{"cuNoSuchFunction", 12060, 0, "-", statusNotFound},
		{"cuMemAlloc_v2", 12060, 0, "-", statusNotFound},
		{"cuCtxCreate_v3", 12060, 0, "-", statusNotFound},
		{"cuMemAdvise_v2", 12060, 0, "cuMemAdvise_v2", statusSuccess},
	}
	n := newNode(t, "")
	var args []string
	for _, tc := range tests {
		args = append(args, fmt.Sprintf("%s:%d:%d", tc.name, tc.version, tc.flags))
	}
	r := n.run(nil, "fc_procaddr", args...).ok(t)
	got := r.all("lookup")
	if len(got) != len(tests) {
		t.Fatalf("got %d lookups for %d requests:\n%s", len(got), len(tests), r.stdout)
	}
	for i, tc := range tests {
		t.Run(fmt.Sprintf("%s@%d/flags=%d", tc.name, tc.version, tc.flags), func(t *testing.T) {
			ev := got[i]
			wantResult := "0"
			if tc.status != statusSuccess {
				wantResult = resultNotFound
			}
			if ev["symbol"] != tc.symbol || ev["status"] != tc.status || ev["result"] != wantResult {
				t.Errorf("got %v, want symbol=%s status=%s result=%s", ev, tc.symbol, tc.status, wantResult)
			}
		})
	}
}

// The 4-argument CUDA 11.3 cuGetProcAddress and the runtime's
// cudaGetDriverEntryPoint resolve the same way; unmodelled entry points exist
// and answer CUDA_ERROR_NOT_SUPPORTED.
func TestGetProcAddressOtherPaths(t *testing.T) {
	n := newNode(t, "")
	r := n.run(nil, "fc_procaddr",
		"--v1", "cuMemAlloc:12060:0", "cuMemcpyDtoH:12060:2", "cuNoSuch:12060:0",
		"--runtime", "cuMemAlloc:0", "cuMemsetD8Async:2", "cuNoSuch:0",
		"--call-unmodelled", "cuGraphClone", "cuLinkCreate_v2", "cuTexObjectCreate").ok(t)
	want := []struct{ api, name, result, symbol string }{
		{"v1", "cuMemAlloc", "0", "cuMemAlloc_v2"},
		{"v1", "cuMemcpyDtoH", "0", "cuMemcpyDtoH_v2_ptds"},
		{"v1", "cuNoSuch", resultNotFound, "-"},
		{"runtime", "cuMemAlloc", "0", "cuMemAlloc_v2"},
		{"runtime", "cuMemsetD8Async", "0", "cuMemsetD8Async_ptsz"},
		{"runtime", "cuNoSuch", "500", "-"}, // cudaErrorSymbolNotFound
	}
	got := r.all("lookup")
	if len(got) != len(want) {
		t.Fatalf("lookups: %s", r.stdout)
	}
	for i, w := range want {
		if got[i]["api"] != w.api || got[i]["name"] != w.name || got[i]["result"] != w.result || got[i]["symbol"] != w.symbol {
			t.Errorf("lookup %v, want %+v", got[i], w)
		}
	}
	calls := r.all("call")
	if len(calls) != 3 {
		t.Fatalf("calls: %s", r.stdout)
	}
	for _, c := range calls {
		if c["result"] != "801" {
			t.Errorf("%v: want CUDA_ERROR_NOT_SUPPORTED (801)", c)
		}
	}
}

// The runtime reaches the driver only through cuGetProcAddress_v2: in a
// program that uses only the runtime, the one libcuda symbol the dynamic
// linker ever binds (for libcudart's dlsym) is cuGetProcAddress_v2.
func TestRuntimeResolvesDriverThroughGetProcAddress(t *testing.T) {
	n := newNode(t, "1GiB")
	dir := t.TempDir()
	cmd := exec.Command(n.program("caching_allocator"), "--iters", "20")
	cmd.Env = n.env("LD_DEBUG=bindings", "LD_DEBUG_OUTPUT="+dir+"/ld")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	logs, err := os.ReadDir(dir)
	if err != nil || len(logs) == 0 {
		t.Fatalf("no LD_DEBUG output: %v", err)
	}
	bound := map[string]bool{}
	for _, l := range logs {
		b, err := os.ReadFile(dir + "/" + l.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			_, to, ok := strings.Cut(line, " to ")
			if !ok || !strings.Contains(to, "libcuda.so.1") {
				continue
			}
			if _, sym, ok := strings.Cut(to, "symbol `"); ok {
				sym, _, _ = strings.Cut(sym, "'")
				bound[sym] = true
			}
		}
	}
	if len(bound) != 1 || !bound["cuGetProcAddress_v2"] {
		t.Errorf("libcuda symbols bound by name: %v, want only cuGetProcAddress_v2", bound)
	}
}
