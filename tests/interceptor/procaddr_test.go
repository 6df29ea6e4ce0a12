package interceptor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A driver whose cuGetProcAddress answers with private entry points (none
// of its exported symbols: FAKECUDA_PROCADDR=private) gets the same hooks as
// one that answers with its exports, for every row and version of the table
// and at 13000 (a version past the table, what a CUDA 13 runtime asks at),
// and the same answers stay the driver's.
func TestPrivateEntryPointsHooked(t *testing.T) {
	tsvPath, _ := entryPointsTSV(t)
	prog := probe.Bin(t, "gs_tables")
	sock := filepath.Join(t.TempDir(), "none.sock")
	run := func(private, hooked bool) []string {
		env := fakeEnv(t, "80GiB")
		if hooked {
			env = preload(t, env, "GPUSLICE_SESSION=tables", "GPUSLICE_IPC_SOCK="+sock)
		}
		if private {
			env = append(env, "FAKECUDA_PROCADDR=private")
		}
		r := probe.Run(t, env, prog, tsvPath)
		stderr := r.Stderr
		if hooked { // no daemon: the one line saying allocations will fail
			stderr = failLine.ReplaceAllString(strings.TrimSpace(stderr), "")
		}
		if r.Err != nil || stderr != "" {
			t.Fatalf("gs_tables (private %v, hooked %v): %v\n%s", private, hooked, r.Err, r.Stderr)
		}
		return strings.Split(strings.TrimSpace(r.Stdout), "\n")
	}
	exported, exportedHooked := run(false, false), run(false, true)
	private, privateHooked := run(true, false), run(true, true)
	if len(private) != len(exported) || len(privateHooked) != len(exported) || len(exportedHooked) != len(exported) {
		t.Fatalf("line counts differ: %d %d %d %d", len(exported), len(exportedHooked), len(private), len(privateHooked))
	}
	lookups, hooks, later := 0, 0, 0
	for i := range exported {
		lhs, res, _ := strings.Cut(exported[i], " -> ")
		if !strings.HasPrefix(lhs, "gpa") {
			continue
		}
		_, resEH, _ := strings.Cut(exportedHooked[i], " -> ")
		lhsP, resP, _ := strings.Cut(private[i], " -> ")
		_, resPH, _ := strings.Cut(privateHooked[i], " -> ")
		if lhsP != lhs {
			t.Fatalf("line %d: %q vs %q", i, lhs, lhsP)
		}
		if res == "null" {
			if resP != "null" || resPH != "null" {
				t.Errorf("%s: found nothing exported, but private %s, hooked %s", lhs, resP, resPH)
			}
			continue
		}
		lookups++
		// the knob works: the answer is no exported symbol
		if resP != "libcuda.so.1:?" {
			t.Errorf("%s: private answer %s, want an unexported address in libcuda.so.1", lhs, resP)
		}
		switch {
		case strings.HasPrefix(resEH, "libgpuslice.so:"):
			hooks++
			if strings.Contains(lhs, " 13000 ") {
				later++
			}
			if resPH != resEH {
				t.Errorf("%s: through a private entry point %s, want %s as through the export %s", lhs, resPH, resEH, res)
			}
		case resPH != resP:
			t.Errorf("%s: private answer %s became %s; the exported one (%s) stays the driver's", lhs, resP, resPH, res)
		}
	}
	if lookups < 1000 || hooks < 100 || later < 20 {
		t.Errorf("compared %d lookups, %d hooked, %d of them at 13000: too few", lookups, hooks, later)
	}
}
