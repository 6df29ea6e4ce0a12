package core

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// nvmlShim is an NVML that makes a hooked CUDA call while it starts (a
// vendor NVML may call into other libraries from nvmlInit) and forwards
// what the interceptor uses to fakecuda's NVML.
const nvmlShim = `
#include <dlfcn.h>
#include <stddef.h>
#include "cuda.h"
#include "nvml.h"

static void *real(const char *name)
{
	static void *h;
	if (h == NULL)
		h = dlopen(FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
	return h ? dlsym(h, name) : NULL;
}

nvmlReturn_t nvmlInit_v2(void)
{
	CUresult (*info)(size_t *, size_t *) = (CUresult (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
	size_t f, t;
	if (info != NULL)
		(void)info(&f, &t);
	nvmlReturn_t (*init)(void) = (nvmlReturn_t (*)(void))real("nvmlInit_v2");
	return init ? init() : NVML_ERROR_LIBRARY_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
	nvmlReturn_t (*f)(const char *, nvmlDevice_t *) =
		(nvmlReturn_t (*)(const char *, nvmlDevice_t *))real("nvmlDeviceGetHandleByUUID");
	return f ? f(uuid, dev) : NVML_ERROR_LIBRARY_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *n, nvmlProcessInfo_t *infos)
{
	nvmlReturn_t (*f)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *) =
		(nvmlReturn_t (*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *))real(
			"nvmlDeviceGetComputeRunningProcesses_v3");
	return f ? f(dev, n, infos) : NVML_ERROR_LIBRARY_NOT_FOUND;
}
`

// The interceptor starts NVML to measure what its first context costs
// (inside the context hook). A hooked call NVML makes meanwhile (here
// cuMemGetInfo_v2, looked up with dlsym from nvmlInit_v2) must not wait
// for a lock the measuring thread holds: the process runs, is admitted,
// and its context is still charged.
func TestNVMLStartMakesHookedCall(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)

	dir := t.TempDir()
	src := filepath.Join(dir, "shim.c")
	if err := os.WriteFile(src, []byte(nvmlShim), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(d.Build, "lib", "libnvidia-ml.so.1")
	cc := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-I"+filepath.Join(testenv.RepoRoot(t), "native", "include"),
		`-DFAKE_NVML="`+fake+`"`, "-o", filepath.Join(dir, "libnvidia-ml.so.1"), src, "-ldl")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build the NVML shim: %v\n%s", err, out)
	}

	env := sessionEnv(t, d, sess.ID)
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			env[i] = "LD_LIBRARY_PATH=" + dir + ":" + v
		}
	}
	// A process stuck in its first attach never finishes: killed after 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, example(t, "target_app"), "--api", "driver", "--step", "2MiB", "--count", "1")
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("target_app: %v (stuck in its first attach?)\n%s%s", err, out, stderr.String())
	}
	if !strings.Contains(string(out), "event=alloc index=1 bytes=2097152 status=allowed") {
		t.Errorf("allocation not admitted:\n%s%s", out, stderr.String())
	}
	if p := l.Peak(0); p != 64*MiB+2*MiB {
		t.Errorf("ledger peak %d bytes, want the context's 64 MiB and 2 MiB", p)
	}
}
