package interceptor

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A Python program that allocates as PyTorch does (ctypes, libcuda.so.1
// loaded with dlopen) until the quota refuses: the refusal line comes
// first on stderr, and what the framework prints after it is the same,
// byte for byte, as with the line turned off.
func TestRefusalLinePython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	script := filepath.Join(testenv.RepoRoot(t), "tests", "interceptor", "testdata", "torch_like.py")
	env := noticeSession(t, "31337", 256<<20, "GPUSLICE_GPU_MEM=256M")
	on := probe.Run(t, env, py, script, "100")
	off := probe.Run(t, append(env, "GPUSLICE_NOTICE=off"), py, script, "100")
	for _, r := range []probe.Result{on, off} {
		if r.Err == nil || !strings.Contains(r.Stdout, "held=2 blocks") ||
			!strings.HasSuffix(r.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB. "+
				"GPU 0 has a total capacity of 256.00 MiB of which 56.00 MiB is free. Of the allocated memory 200.00 MiB "+
				"is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.\n") {
			t.Fatalf("the program did not fail as PyTorch does (%v):\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
		}
	}
	first, rest, _ := strings.Cut(on.Stderr, "\n")
	m := refusalLine.FindStringSubmatch(first)
	if m == nil || m[2] != "31337" || m[3] != "100MiB" || m[5] != "200MiB" || m[6] != "256MiB" {
		t.Fatalf("stderr does not start with the refusal line:\n%s", on.Stderr)
	}
	if rest != off.Stderr {
		t.Fatalf("the framework's own output changed with the line:\nwith:\n%s\nwithout:\n%s", rest, off.Stderr)
	}
}
