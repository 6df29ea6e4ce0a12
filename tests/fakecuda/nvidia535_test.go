package fakecuda

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

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

// The NVML queries Slurm's gpu/nvml plugin and older NVML clients make
// (fc_nvml_topo, a child process: NVML maps one node state per process):
// CPU affinity (every online CPU: a fakecuda GPU is local to no socket), the
// v1 PCI record, no MIG, the default compute mode, event sets that never fire.
func TestNVMLDeviceTopologyQueries(t *testing.T) {
	n := newNode(t, "2x1GiB")
	r := n.run(nil, "fc_nvml_topo").ok(t)
	want := map[string]map[string]string{
		"pci_v1":       {"ret": "0", "busid": "0000:11:00.0", "bus": "17", "devid": "0x20b210de", "v3_ret": "0", "v3_bus": "17", "reserved": "0"},
		"affinity":     {"ret": "0", "cpus": strconv.Itoa(runtime.NumCPU())},
		"mig":          {"ret": "0", "is_mig": "0", "max_ret": "0", "max": "0"},
		"compute_mode": {"ret": "0", "mode": "0"},
		// 10 = NVML_ERROR_TIMEOUT
		"events": {"create": "0", "supported": "0", "types": "0", "register": "0", "wait": "10", "free": "0"},
	}
	for kind, kv := range want {
		e := r.one(t, kind)
		for k, v := range kv {
			if e[k] != v {
				t.Errorf("%s %s=%q, want %q (%v)", kind, k, e[k], v, e)
			}
		}
	}
}
