package fakecuda

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// readExportList reads a list of names exported by NVIDIA's 535 driver
// (testdata/nvidia-535, one name a line, # comments).
func readExportList(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "nvidia-535", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// Every name the real 535 libcuda and NVML export is exported by fakecuda's,
// so a program linked or dlsym'ing against the real driver finds them all.
func TestExportsCoverNVIDIA535(t *testing.T) {
	for _, c := range []struct{ list, lib string }{
		{"libcuda.exports", "libcuda.so.1"},
		{"libnvidia-ml.exports", "libnvidia-ml.so.1"},
	} {
		want := readExportList(t, c.list)
		if len(want) < 300 {
			t.Fatalf("%s lists %d names: not the 535 list", c.list, len(want))
		}
		got := definedDynamicSymbols(t, filepath.Join(testenv.BuildDir(t), "lib", c.lib))
		var missing []string
		for _, n := range want {
			if !got[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s lacks %d names NVIDIA's 535 %s exports: %v", c.lib, len(missing), c.lib, missing)
		}
	}
}

// The NVML queries Slurm's gpu/nvml plugin and older NVML clients make:
// CPU affinity (every online CPU: a fakecuda GPU is local to no socket), the
// v1 PCI record, no MIG, the default compute mode, event sets that never fire.
func TestNVMLDeviceTopologyQueries(t *testing.T) {
	n := newNode(t, "2x1GiB")
	t.Setenv("FAKECUDA_DEVICES", n.devices)
	t.Setenv("FAKECUDA_STATE", n.state)
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(n.lib(), "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	d, ret := lib.DeviceGetHandleByIndex(1)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(1): %v", ret)
	}
	words := (runtime.NumCPU() + 63) / 64
	aff, ret := d.GetCpuAffinity(words)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetCpuAffinity: %v", ret)
	}
	online := 0
	for _, w := range aff {
		for ; w != 0; w &= w - 1 {
			online++
		}
	}
	if online != runtime.NumCPU() {
		t.Errorf("GetCpuAffinity %x: %d CPUs, want the %d online", aff, online, runtime.NumCPU())
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS || pci.Bus != 0x11 {
		t.Errorf("GetPciInfo: %+v %v, want bus 0x11", pci, ret)
	}
	if mig, ret := d.IsMigDeviceHandle(); ret != nvml.SUCCESS || mig {
		t.Errorf("IsMigDeviceHandle: %v %v", mig, ret)
	}
	if m, ret := d.GetComputeMode(); ret != nvml.SUCCESS || m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GetComputeMode: %v %v", m, ret)
	}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate: %v", ret)
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("EventSet.Wait: %v, want TIMEOUT (a fakecuda GPU raises no events)", ret)
	}
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Errorf("EventSet.Free: %v", ret)
	}

	// The v1 PCI record (nvmlDeviceGetPciInfo, no suffix): 16-byte bus id.
	r := n.run(nil, "fc_nvml_pci_v1").ok(t)
	e := r.one(t, "pci_v1")
	if e["busid"] != "0000:10:00.0" || e["bus"] != "16" || e["v3_bus"] != "16" || e["devid"] != "0x20b210de" {
		t.Errorf("nvmlDeviceGetPciInfo (v1): %v", e)
	}
}
