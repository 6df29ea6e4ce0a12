package nvidia

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestRuntimeProcAddress replays, against fakecuda's libcuda.so.1, every
// cuGetProcAddress request NVIDIA's runtime 11.8 makes at start-up
// (testdata/cudart-11.8-getprocaddress.txt, observed: 384 requests for 319
// names, 4-argument form): each must resolve to an entry point.
func TestRuntimeProcAddress(t *testing.T) {
	replay := rtProbe(t, "procaddr_replay")
	list := filepath.Join("testdata", "cudart-11.8-getprocaddress.txt")
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	requests := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(line, "#") {
			want[f[0]] = true
			requests++
		}
	}
	if len(want) != 319 || requests != 384 {
		t.Fatalf("%s: %d requests for %d names, want 384 for 319", list, requests, len(want))
	}
	r := rtRun(t, rtPlainEnv(t, "80GiB"), replay, list)
	if r.code != 0 {
		t.Fatalf("procaddr_replay exited %d:\n%s", r.code, r.stderr)
	}
	if got, lib := r.get("library"), filepath.Join(testenv.BuildDir(t), "lib", "libcuda.so.1"); got != lib {
		t.Errorf("cuGetProcAddress came from %s, want fakecuda's %s", got, lib)
	}
	resolved := map[string]string{}
	for _, v := range r.kv["resolve"] {
		f := strings.Fields(v) // symbol version flags result name
		if len(f) != 5 {
			t.Fatalf("bad line resolve=%s", v)
		}
		if f[3] != "0" || f[4] == "-" {
			t.Errorf("cuGetProcAddress(%s, %s, flags %s) = %s, entry point %s", f[0], f[1], f[2], f[3], f[4])
			continue
		}
		resolved[f[0]+" "+f[1]+" "+f[2]] = f[4]
	}
	if len(r.kv["resolve"]) != requests {
		t.Errorf("%d requests replayed, want %d", len(r.kv["resolve"]), requests)
	}
	// The version and per-thread rules, on requests the runtime makes.
	for req, sym := range map[string]string{
		"cuMemAlloc 3020 0":               "cuMemAlloc_v2",
		"cuMemcpyHtoD 7000 2":             "cuMemcpyHtoD_v2_ptds",
		"cuStreamBeginCapture 10010 2":    "cuStreamBeginCapture_v2_ptsz",
		"cuGLMapBufferObjectAsync 7000 2": "cuGLMapBufferObjectAsync_v2_ptsz",
		"cuProfilerStart 4000 0":          "cuProfilerStart",
	} {
		if got := resolved[req]; got != sym {
			t.Errorf("cuGetProcAddress(%s) resolved to %q, want %s", req, got, sym)
		}
	}
}
