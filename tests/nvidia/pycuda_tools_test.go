package nvidia

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pycudaScript drives pycuda (Debian's python3-pycuda, its _driver extension
// linked against libcuda.so.1): it creates a context, reports mem_get_info,
// allocates first bytes and then again until refused, copies a numpy array
// through the device, and exits, tearing the context down (cuCtxDetach).
//
//	meminfo <free> <total>
//	alloc <bytes> ok|denied
//	copy ok|mismatch
//	meminfo <free> <total>
const pycudaScript = `
import sys
import numpy as np
import pycuda.autoinit
import pycuda.driver as cuda

free, total = cuda.mem_get_info()
print("meminfo", free, total)
first, second = int(sys.argv[1]), int(sys.argv[2])
held = []
for size in (first, second):
    try:
        held.append(cuda.mem_alloc(size))
        print("alloc", size, "ok")
    except cuda.MemoryError:
        print("alloc", size, "denied")
host = np.arange(4096, dtype=np.uint32)
back = np.zeros_like(host)
dev = cuda.mem_alloc(host.nbytes)
cuda.memcpy_htod(dev, host)
cuda.memcpy_dtoh(back, dev)
print("copy", "ok" if (host == back).all() else "mismatch")
free, total = cuda.mem_get_info()
print("meminfo", free, total)
`

// pycudaEnv is what python needs to import pycuda from the unpacked packages.
func pycudaEnv(root string) []string {
	return []string{
		"PYTHONPATH=" + filepath.Join(root, "usr/lib/python3/dist-packages"),
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// pycudaLibPath puts fakecuda first, then the unpacked Boost.Python and
// Boost.Thread that pycuda's extension links to.
func pycudaLibPath(build, root string) string {
	return "LD_LIBRARY_PATH=" + filepath.Join(build, "lib") + ":" + filepath.Join(root, "usr/lib/x86_64-linux-gnu")
}

func pycudaLines(t *testing.T, r toolsResult) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 {
			out[f[0]] = append(out[f[0]], strings.Join(f[1:], " "))
		}
	}
	return out
}

// The context teardown at exit must not fail: pycuda prints a warning when
// it does (as it did while cuCtxDetach was NOT_SUPPORTED).
func pycudaCleanExit(t *testing.T, r toolsResult) {
	t.Helper()
	if strings.Contains(r.stderr, "PyCUDA WARNING") || strings.Contains(r.stderr, "failed") {
		t.Errorf("pycuda's context teardown at exit failed:\n%s", r.stderr)
	}
}

// pycuda imports and works on fakecuda, and under a quota sees the quota
// and is refused past it.
func TestPycuda(t *testing.T) {
	root := toolsRoot(t)
	toolsFile(t, root, "usr/lib/python3/dist-packages/pycuda/_driver.cpython-311-x86_64-linux-gnu.so")
	row := &toolsRow{Program: "pycuda 2022.2.2 (Debian python3-pycuda)"}
	defer toolsRecord(t, row)
	const mib = toolsMiB

	row.Runs = t.Run("plain", func(t *testing.T) {
		n := newToolsNode(t, "4GiB")
		env := append(n.env(pycudaEnv(root)...), pycudaLibPath(n.build, root))
		r := toolsExec(t, env, "/usr/bin/python3", "-c", pycudaScript,
			strconv.FormatInt(64*mib, 10), strconv.FormatInt(8192*mib, 10)).ok(t)
		toolsLoaded(t, r, filepath.Join(n.build, "lib"), filepath.Join(n.build, "lib", "libcuda.so.1"))
		got := pycudaLines(t, r)
		want := map[string][]string{
			"meminfo": {"4294967296 4294967296", strconv.FormatInt(4096*mib-64*mib-16384, 10) + " 4294967296"},
			"alloc":   {strconv.FormatInt(64*mib, 10) + " ok", strconv.FormatInt(8192*mib, 10) + " denied"},
			"copy":    {"ok"},
		}
		for k, v := range want {
			if strings.Join(got[k], "|") != strings.Join(v, "|") {
				t.Errorf("pycuda %s: %q, want %q\n%s", k, got[k], v, r.stdout)
			}
		}
		pycudaCleanExit(t, r)
	})

	row.QuotaEnforced = t.Run("session", func(t *testing.T) {
		d := toolsDaemon(t, "16GiB")
		env := append(pycudaEnv(root), pycudaLibPath(d.Build, root))
		r := toolsInSession(t, d, "1G", env, "/usr/bin/python3", "-c", pycudaScript,
			strconv.FormatInt(600*mib, 10), strconv.FormatInt(600*mib, 10)).ok(t)
		lib := filepath.Join(d.Build, "lib")
		toolsLoaded(t, r, lib, filepath.Join(lib, "libcuda.so.1"), filepath.Join(lib, "libgpuslice.so"))
		got := pycudaLines(t, r)
		if a := strings.Join(got["alloc"], "|"); a != "629145600 ok|629145600 denied" {
			t.Errorf("pycuda under a 1 GiB quota: allocations %q, want the second 600 MiB refused\n%s", a, r.stdout)
		}
		if c := strings.Join(got["copy"], ""); c != "ok" {
			t.Errorf("pycuda copy under the quota: %q", c)
		}
		m := got["meminfo"]
		if len(m) != 2 || m[0] != "1073741824 1073741824" || m[1] != strconv.FormatInt(1024*mib-600*mib-16384, 10)+" 1073741824" {
			t.Errorf("pycuda mem_get_info under a 1 GiB quota: %q, want the quota as total", m)
		}
		row.QueriesShowQuota = !t.Failed()
		pycudaCleanExit(t, r)
	})
	row.Note = "import, mem_get_info, mem_alloc, memcpy round trip, context teardown at exit (cuCtxDetach); " +
		"under a 1 GiB quota the second 600 MiB mem_alloc raises MemoryError and mem_get_info reports the quota"
}
