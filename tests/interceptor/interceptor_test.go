// Package interceptor tests libgpuslice.so at the library level, with real
// processes on fakecuda: inert and fail-closed behaviour, its IPC reply
// parser against a peer that speaks the protocol wrongly on purpose, and
// the agreement of its exports, dlsym and cuGetProcAddress tables with
// native/interceptor/hooks.def.
package interceptor

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Without GPUSLICE_SESSION the library changes nothing and says nothing.
func TestInertWithoutSession(t *testing.T) {
	prog := probe.Bin(t, "gs_probe")
	steps := []string{"dev:0", "meminfo", "totalmem:0", "alloc:1G", "pitch:1000:100", "vmm:64M",
		"array:1024:1024", "async:16M", "meminfo", "nvml", "freeall", "meminfo", "alloc:100G"}
	plain := probe.Run(t, fakeEnv(t, "80GiB"), prog, steps...)
	pre := probe.Run(t, preload(t, fakeEnv(t, "80GiB"), "GPUSLICE_DEBUG=1"), prog, steps...)
	if plain.Err != nil || pre.Err != nil {
		t.Fatalf("exit: plain %v, preloaded %v\n%s\n%s", plain.Err, pre.Err, plain.Stdout, pre.Stdout)
	}
	if pre.Stderr != "" {
		t.Errorf("inert library wrote to stderr: %q", pre.Stderr)
	}
	if plain.Stdout != pre.Stdout {
		t.Errorf("results differ with the inert interceptor:\nplain:\n%s\npreloaded:\n%s", plain.Stdout, pre.Stdout)
	}
	if got := pre.Find(t, "alloc", 0).Get("rc"); got != "0" {
		t.Errorf("alloc rc=%s, want 0", got)
	}
	if got := pre.Find(t, "alloc", 1).Get("rc"); got != "2" {
		t.Errorf("100G alloc on an 80 GiB device: rc=%s, want 2", got)
	}
}

// With a session and no daemon: allocations fail with
// CUDA_ERROR_OUT_OF_MEMORY and exactly one line explains why, even across
// the once-per-second re-attach attempts.
func TestFailClosedWithoutDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	env := preload(t, fakeEnv(t, "80GiB"), "GPUSLICE_SESSION=job42", "GPUSLICE_IPC_SOCK="+sock)
	r := probe.Run(t, env, probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:1M", "managed:1M", "vmm:2M", "array:64:64", "async:1M", "sleep:1100", "alloc:1M",
		"meminfo", "totalmem:0")
	if r.Err != nil {
		t.Fatalf("exit: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	for _, name := range []string{"alloc", "managed", "vmm", "array", "async"} {
		for _, s := range r.All(name) {
			if s.Get("rc") != "2" {
				t.Errorf("%s: rc=%s, want 2 (CUDA_ERROR_OUT_OF_MEMORY)", s.Line, s.Get("rc"))
			}
		}
	}
	if len(r.All("alloc")) != 2 {
		t.Fatalf("want 2 alloc lines:\n%s", r.Stdout)
	}
	reason := wantFailClosed(t, r, "job42", sock)
	if !strings.Contains(reason, "connect") {
		t.Errorf("reason %q does not say the connection failed", reason)
	}
	mi := r.Find(t, "meminfo", 0)
	if mi.Get("rc") != "0" || mi.Get("free") != "0" {
		t.Errorf("meminfo while failed closed: %s, want rc=0 free=0", mi.Line)
	}
	if tm := r.Find(t, "totalmem", 0); tm.Uint(t, "bytes") > 80<<30 {
		t.Errorf("totalmem %s exceeds the physical 80 GiB", tm.Line)
	}
}

// An unusable environment (session name too long) also fails closed.
func TestFailClosedBadEnvironment(t *testing.T) {
	long := strings.Repeat("s", 64)
	sock := filepath.Join(t.TempDir(), "x.sock")
	env := preload(t, fakeEnv(t, "80GiB"), "GPUSLICE_SESSION="+long, "GPUSLICE_IPC_SOCK="+sock)
	r := probe.Run(t, env, probe.Bin(t, "gs_probe"), "dev:0", "alloc:1M")
	if got := r.Find(t, "alloc", 0).Get("rc"); got != "2" {
		t.Errorf("alloc rc=%s, want 2", got)
	}
	if reason := wantFailClosed(t, r, long, sock); !strings.Contains(reason, "longer than 63") {
		t.Errorf("reason %q", reason)
	}
}

// versionSymbol is the symbol cuGetProcAddress(base, v) resolves to by the
// driver's naming: base for the first version listed, base_vK for the K-th.
func versionSymbol(base, versions string, v int) string {
	for i, s := range strings.Split(versions, ",") {
		if s == strconv.Itoa(v) {
			if i == 0 {
				return base
			}
			return base + "_v" + strconv.Itoa(i+1)
		}
	}
	return ""
}

// hooks.def, the TSV, the exported symbols, dlsym and cuGetProcAddress all agree.
func TestHookListConsistency(t *testing.T) {
	hooks := hooksDef(t)
	tsvPath, rows := entryPointsTSV(t)

	t.Run("entries exist in the TSV", func(t *testing.T) {
		for _, h := range hooks {
			if h.Lib != "CU" {
				continue
			}
			row, ok := rows[h.Base]
			if !ok {
				t.Errorf("%s: base name %s is not in the TSV", h.Symbol, h.Base)
				continue
			}
			switch {
			case h.Symbol == row.Default && !h.PTDS:
			case h.Symbol == row.PTDS && h.PTDS:
			case h.Symbol == h.Base && row.Default != h.Base && !h.PTDS: // pre-rename entry point
			case !h.PTDS && h.Symbol == versionSymbol(h.Base, row.Versions, h.Version):
				// a later ABI with a declared symbol of its own (cuCtxCreate_v4 at 12050)
			default:
				t.Errorf("%s: not a symbol of TSV row %+v (ptds=%v)", h.Symbol, row, h.PTDS)
			}
			if !strings.Contains(","+row.Versions+",", ","+strconv.Itoa(h.Version)+",") {
				t.Errorf("%s: version %d is not among %s's versions %s", h.Symbol, h.Version, h.Base, row.Versions)
			}
		}
	})
	t.Run("every variant of a hooked base is hooked", func(t *testing.T) {
		have := map[string]bool{}
		for _, h := range hooks {
			have[h.Symbol] = true
		}
		for _, h := range hooks {
			if h.Lib != "CU" {
				continue
			}
			row := rows[h.Base]
			if !have[row.Default] {
				t.Errorf("%s is hooked but its default symbol %s is not", h.Base, row.Default)
			}
			if row.PTDS != "-" && !have[row.PTDS] {
				t.Errorf("%s is hooked but its per-thread symbol %s is not", h.Base, row.PTDS)
			}
		}
	})
	t.Run("NVML entries are declared in nvml.h", func(t *testing.T) {
		hdr := readRepoFile(t, "native/include/nvml.h")
		for _, h := range hooks {
			if h.Lib == "NVML" && !strings.Contains(hdr, " "+h.Symbol+"(") {
				t.Errorf("%s is not declared in nvml.h", h.Symbol)
			}
		}
	})
	t.Run("exports", func(t *testing.T) {
		out, err := exec.Command("nm", "-D", "--defined-only", probe.Lib(t)).Output()
		if err != nil {
			t.Fatalf("nm: %v", err)
		}
		var got []string
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 || f[1] == "A" {
				continue
			}
			got = append(got, f[2])
		}
		want := []string{"dlsym@@GLIBC_2.34", "dlsym@GLIBC_2.2.5"}
		for _, h := range hooks {
			want = append(want, h.Symbol+"@@GPUSLICE_1")
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("exported symbols:\n got %v\nwant %v", got, want)
		}
	})
	t.Run("dlsym and cuGetProcAddress tables", func(t *testing.T) {
		prog := probe.Bin(t, "gs_tables")
		plain := probe.Run(t, fakeEnv(t, "80GiB"), prog, tsvPath)
		if plain.Err != nil {
			t.Fatalf("gs_tables: %v\n%s", plain.Err, plain.Stderr)
		}
		sock := filepath.Join(t.TempDir(), "none.sock")
		hooked := probe.Run(t, preload(t, fakeEnv(t, "80GiB"), "GPUSLICE_SESSION=tables",
			"GPUSLICE_IPC_SOCK="+sock), prog, tsvPath)
		if hooked.Err != nil {
			t.Fatalf("gs_tables preloaded: %v\n%s", hooked.Err, hooked.Stderr)
		}
		pl := strings.Split(strings.TrimSpace(plain.Stdout), "\n")
		hl := strings.Split(strings.TrimSpace(hooked.Stdout), "\n")
		if len(pl) != len(hl) || len(pl) < 1000 {
			t.Fatalf("line counts differ or too few: %d vs %d", len(pl), len(hl))
		}
		bySym := map[string]hookEntry{}
		for _, h := range hooks {
			bySym[h.Symbol] = h
		}
		gpaHooked := map[string]bool{} // base/symbol pairs reached through cuGetProcAddress
		dlsymHooked := map[string]bool{}
		for i := range pl {
			lhsP, resP, _ := strings.Cut(pl[i], " -> ")
			lhsH, resH, _ := strings.Cut(hl[i], " -> ")
			if lhsP != lhsH {
				t.Fatalf("line %d: %q vs %q", i, lhsP, lhsH)
			}
			f := strings.Fields(lhsP)
			want := resP
			lib, sym, _ := strings.Cut(resP, ":")
			switch f[0] {
			case "rtlddefault":
				// libcuda is dlopened locally here: nothing in the global
				// scope, so the interposed dlsym must find nothing either
				if resP != "null" {
					t.Errorf("%s: plain run found %s", lhsP, resP)
				}
			case "dlsym", "nvml":
				if h, ok := bySym[f[1]]; ok {
					want = "libgpuslice.so:" + h.Symbol
					dlsymHooked[h.Symbol] = true
				}
			case "gpa", "gpa4":
				// hooked when the driver resolved to a hooked entry point
				// (of this base, or another's: cuGraphInstantiate at 11040
				// is cuGraphInstantiateWithFlags)
				if h, ok := bySym[sym]; ok && h.Lib == "CU" && lib == "libcuda.so.1" {
					want = "libgpuslice.so:" + h.Symbol
					if h.Base == f[1] {
						gpaHooked[h.Base+"/"+h.Symbol] = true
					}
				}
			case "dlsymver":
				want = "libgpuslice.so:cuMemAlloc_v2"
			case "dlsymfn", "rtldnext":
				want = "libgpuslice.so:dlsym"
			}
			if resH != want {
				t.Errorf("%s: got %s, want %s (plain: %s)", lhsP, resH, want, resP)
			}
		}
		for _, h := range hooks {
			if !dlsymHooked[h.Symbol] {
				t.Errorf("dlsym never returned the hook %s", h.Symbol)
			}
			if h.Lib == "CU" && !gpaHooked[h.Base+"/"+h.Symbol] {
				t.Errorf("cuGetProcAddress never returned the hook %s for %s", h.Symbol, h.Base)
			}
		}
		// the legacy entry point stays unhooked
		for _, l := range hl {
			if strings.HasPrefix(l, "gpa cuMemAlloc 2000 0 ") && !strings.HasSuffix(l, "libcuda.so.1:cuMemAlloc") {
				t.Errorf("legacy lookup: %s", l)
			}
		}
	})
}

// dlsym exported at both glibc versions routes hooked names, and without a
// session passes everything through.
func TestDlsymVersionsInert(t *testing.T) {
	_, _ = entryPointsTSV(t)
	tsv := filepath.Join(t.TempDir(), "one.tsv")
	writeFile(t, tsv, "base_name\tversions\tdefault_symbol\tptds_symbol\ncuMemAlloc\t2000,3020\tcuMemAlloc_v2\t-\n")
	r := probe.Run(t, preload(t, fakeEnv(t, "80GiB")), probe.Bin(t, "gs_tables"), tsv)
	if r.Err != nil || r.Stderr != "" {
		t.Fatalf("gs_tables: %v\n%s", r.Err, r.Stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		_, res, _ := strings.Cut(l, " -> ")
		switch {
		case strings.HasPrefix(l, "dlsymfn "), strings.HasPrefix(l, "rtldnext "):
			if res != "libgpuslice.so:dlsym" {
				t.Errorf("%s: want the interposed dlsym", l)
			}
		case strings.HasPrefix(l, "dlsym"), strings.HasPrefix(l, "gpa"), strings.HasPrefix(l, "nvml"):
			if strings.HasPrefix(res, "libgpuslice.so") {
				t.Errorf("%s: inert library returned a hook", l)
			}
		}
	}
}

// dlsym on the global scope (RTLD_DEFAULT) in a program linked with -lcuda:
// the driver's definition without a session, the hook with one.
func TestDlsymDefaultHandle(t *testing.T) {
	prog := probe.Bin(t, "gs_probe")
	steps := []string{"noinit", "rtlddefault:cuMemAlloc_v2", "rtlddefault:cuMemAlloc", "rtlddefault:cuInit",
		"rtlddefault:nvmlDeviceGetMemoryInfo_v2"}
	sock := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"plain", fakeEnv(t, "80GiB"), []string{"libcuda.so.1:cuMemAlloc_v2", "libcuda.so.1:cuMemAlloc",
			"libcuda.so.1:cuInit", "libnvidia-ml.so.1:nvmlDeviceGetMemoryInfo_v2"}},
		{"inert", preload(t, fakeEnv(t, "80GiB")), []string{"libcuda.so.1:cuMemAlloc_v2", "libcuda.so.1:cuMemAlloc",
			"libcuda.so.1:cuInit", "libnvidia-ml.so.1:nvmlDeviceGetMemoryInfo_v2"}},
		{"session", preload(t, fakeEnv(t, "80GiB"), "GPUSLICE_SESSION=s", "GPUSLICE_IPC_SOCK="+sock),
			[]string{"libgpuslice.so:cuMemAlloc_v2", "libcuda.so.1:cuMemAlloc", "libcuda.so.1:cuInit",
				"libgpuslice.so:nvmlDeviceGetMemoryInfo_v2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := probe.Run(t, tc.env, prog, steps...)
			got := r.All("rtlddefault")
			if len(got) != len(tc.want) {
				t.Fatalf("output:\n%s\n%s", r.Stdout, r.Stderr)
			}
			for i, w := range tc.want {
				if got[i].Get("at") != w {
					t.Errorf("%s: want at=%s", got[i].Line, w)
				}
			}
		})
	}
}
