package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// NVML's memory limits through the shim, on fakecuda's NVML: each case in
// a child process of its own (fakecuda reads its state's settings once).
func TestMemLimits(t *testing.T) {
	if os.Getenv("GPUSLICE_MEMLIMIT_CHILD") != "" {
		memLimitsChild(t, os.Getenv("GPUSLICE_MEMLIMIT_CHILD"))
		return
	}
	lib := testenv.Artifact(t, "lib/libnvidia-ml.so.1")
	if os.Getuid() != 0 {
		t.Skip("setting a limit needs root")
	}
	for _, mode := range []string{"limits", "none"} {
		t.Run(mode, func(t *testing.T) {
			state := fmt.Sprintf("gs-memlimit-%d-%d", os.Getpid(), time.Now().UnixNano())
			t.Cleanup(func() {
				os.Remove("/dev/shm/fakecuda-" + state)
				os.Remove("/dev/shm/fakecuda-" + state + "@timeline")
			})
			cmd := exec.Command(os.Args[0], "-test.run=^TestMemLimits$", "-test.v")
			cmd.Env = append(testenv.BaseEnv(), "GPUSLICE_MEMLIMIT_CHILD="+mode, "GPUSLICE_TEST_NVML="+lib,
				"FAKECUDA_DEVICES=2x80GiB", "FAKECUDA_STATE="+state)
			if mode == "limits" {
				cmd.Env = append(cmd.Env, "FAKECUDA_MEMORY_LIMITS=1")
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "PASS") {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

func memLimitsChild(t *testing.T, mode string) {
	lib := os.Getenv("GPUSLICE_TEST_NVML")
	gpus, err := Inventory(lib)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("inventory: %v, %v", gpus, err)
	}
	ml, err := OpenMemLimits(lib, gpus)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	v2 := "/sys/fs/cgroup"
	if st, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil && !st.IsDir() {
		v2 = "/sys/fs/cgroup/unified"
	}
	dir := filepath.Join(v2, fmt.Sprintf("gpuslice-memlimit-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("cgroup: %v", err)
	}
	defer os.Remove(dir)
	ok, perr := ml.Probe(0, v2)
	if mode == "none" {
		if ok || perr == nil || !strings.Contains(perr.Error(), "(3)") {
			t.Fatalf("probe on a driver without limits: %v, %v; want no, NOT_SUPPORTED", ok, perr)
		}
		if err := ml.Set(0, dir, 1<<30); err == nil {
			t.Fatal("set on a driver without limits succeeded")
		}
		return
	}
	if !ok {
		t.Fatalf("probe: %v", perr)
	}
	if err := ml.Set(1, dir, 1<<30); err != nil {
		t.Fatal(err)
	}
	if s, h, _, err := ml.Get(1, dir); err != nil || s != 0 || h != 1<<30 {
		t.Fatalf("get: soft %d hard %d, %v; want 0, 1 GiB", s, h, err)
	}
	if _, h, _, err := ml.Get(0, dir); err != nil || h != NoLimit {
		t.Fatalf("the other GPU: hard %d, %v; want none", h, err)
	}
	if err := ml.Clear(1, dir); err != nil {
		t.Fatal(err)
	}
	if s, h, _, err := ml.Get(1, dir); err != nil || s != 0 || h != NoLimit {
		t.Fatalf("after clear: soft %d hard %d, %v", s, h, err)
	}
	// Not a cgroup: not found, as the driver answers for a path without
	// dmem files.
	err = ml.Set(0, t.TempDir(), 1<<30)
	if me, ok := err.(*MemLimitError); !ok || !me.NotFound() {
		t.Fatalf("set on a plain directory: %v; want not found", err)
	}
}
