package fakecuda

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// expectedDriverExports reads native/fakecuda/entry-points.tsv and
// entry-points-interop.tsv: every default_symbol, every ptds_symbol that is
// not "-", the base name of every renamed row, and the legacy names listed in
// the header note on __CUDA_API_VERSION_INTERNAL. It returns the rows of
// entry-points.tsv.
func expectedDriverExports(t *testing.T) (map[string]bool, int) {
	t.Helper()
	want := map[string]bool{}
	rows := readEntryPoints(t, "entry-points.tsv", want)
	readEntryPoints(t, "entry-points-interop.tsv", want)
	return want, rows
}

func readEntryPoints(t *testing.T, file string, want map[string]bool) int {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(t), "native", "fakecuda", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, inNote := 0, false
	name := regexp.MustCompile(`cu[A-Z][A-Za-z0-9_]*`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			switch {
			case strings.Contains(line, "Exported names declared only in"):
				inNote = true
				_, line, _ = strings.Cut(line, "):")
			case inNote && strings.HasPrefix(line, "#   - "):
				inNote = false
			}
			if inNote {
				for _, m := range name.FindAllString(line, -1) {
					want[m] = true
				}
			}
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 4 || fields[0] == "base_name" {
			continue
		}
		rows++
		want[fields[2]] = true
		if fields[3] != "-" {
			want[fields[3]] = true
		}
		if fields[2] != fields[0] {
			want[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func definedDynamicSymbols(t *testing.T, lib string) map[string]bool {
	t.Helper()
	out, err := exec.Command("nm", "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Fatalf("nm -D --defined-only %s: %v", lib, err)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			got[f[2]] = true
		}
	}
	return got
}

func diff(a, b map[string]bool) []string {
	var d []string
	for k := range a {
		if !b[k] {
			d = append(d, k)
		}
	}
	sort.Strings(d)
	return d
}

// libcuda.so.1 exports exactly the names the entry-point lists list: no more, no fewer.
func TestDriverExportsMatchEntryPoints(t *testing.T) {
	want, rows := expectedDriverExports(t)
	if rows != 442 {
		t.Fatalf("entry-points.tsv has %d rows, want 442", rows)
	}
	got := definedDynamicSymbols(t, filepath.Join(testenv.BuildDir(t), "lib", "libcuda.so.1"))
	if missing := diff(want, got); len(missing) > 0 {
		t.Errorf("libcuda.so.1 lacks %d listed names: %v", len(missing), missing)
	}
	if extra := diff(got, want); len(extra) > 0 {
		t.Errorf("libcuda.so.1 exports %d names not listed: %v", len(extra), extra)
	}
	for _, legacy := range []string{"cuMemAlloc", "cuCtxCreate", "cuGetProcAddress", "cuStreamBeginCapture_ptsz", "cuGraphInstantiate_v2"} {
		if !got[legacy] {
			t.Errorf("legacy entry point %s is not exported", legacy)
		}
	}
}

// The per-thread entry points of every modelled function are modelled too:
// in the TSV, a row's default_symbol and ptds_symbol are both real
// definitions or both generated NOT_SUPPORTED stubs (weak).
func TestPerThreadVariantsMatchDefaults(t *testing.T) {
	out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(testenv.BuildDir(t), "lib", "libcuda.so.1")).Output()
	if err != nil {
		t.Fatal(err)
	}
	kind := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			kind[f[2]] = f[1]
		}
	}
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "native", "fakecuda", "entry-points.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	modelled := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, "\t")
		if strings.HasPrefix(line, "#") || len(f) != 4 || f[3] == "-" {
			continue
		}
		if kind[f[2]] == "T" {
			modelled++
		}
		if (kind[f[2]] == "T") != (kind[f[3]] == "T") {
			t.Errorf("%s is %s but its per-thread %s is %s", f[2], kind[f[2]], f[3], kind[f[3]])
		}
	}
	if modelled < 40 {
		t.Errorf("only %d functions with per-thread variants are modelled", modelled)
	}
}

// libnvidia-ml.so.1 exports exactly nvml-entry-points.txt; libcudart.so.12
// exports only runtime API names.
func TestOtherLibraryExports(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "native", "fakecuda", "nvml-entry-points.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want[line] = true
		}
	}
	lib := filepath.Join(testenv.BuildDir(t), "lib")
	got := definedDynamicSymbols(t, filepath.Join(lib, "libnvidia-ml.so.1"))
	if d := diff(want, got); len(d) > 0 {
		t.Errorf("libnvidia-ml.so.1 lacks %v", d)
	}
	if d := diff(got, want); len(d) > 0 {
		t.Errorf("libnvidia-ml.so.1 exports unlisted %v", d)
	}
	for _, must := range []string{"nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlDeviceGetCount_v2",
		"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
		"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
		"nvmlErrorString", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion"} {
		if !got[must] {
			t.Errorf("libnvidia-ml.so.1 does not export %s", must)
		}
	}
	rt := definedDynamicSymbols(t, filepath.Join(lib, "libcudart.so.12"))
	if len(rt) < 40 {
		t.Errorf("libcudart.so.12 exports only %d names", len(rt))
	}
	for s := range rt {
		if !strings.HasPrefix(s, "cuda") {
			t.Errorf("libcudart.so.12 exports %s", s)
		}
	}
}
