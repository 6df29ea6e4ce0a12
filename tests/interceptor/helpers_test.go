package interceptor

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// fakeEnv is a hermetic environment for a fakecuda program: its own
// node-wide fake-GPU state (removed at cleanup), no interceptor.
func fakeEnv(t testing.TB, devices string) []string {
	t.Helper()
	build := testenv.BuildDir(t)
	testenv.Artifact(t, "lib/libcuda.so.1")
	var b [4]byte
	rand.Read(b[:])
	state := fmt.Sprintf("gsint-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", "fakecuda-"+state)) })
	return append(testenv.BaseEnv(),
		"LD_LIBRARY_PATH="+filepath.Join(build, "lib"),
		"FAKECUDA_DEVICES="+devices,
		"FAKECUDA_STATE="+state,
		"FAKECUDA_CTX_BYTES=0", // no context cost in these tests' figures
	)
}

// preload adds the interceptor and extra variables to env.
func preload(t testing.TB, env []string, extra ...string) []string {
	t.Helper()
	out := append([]string{}, env...)
	out = append(out, "LD_PRELOAD="+probe.Lib(t))
	return append(out, extra...)
}

var failLine = regexp.MustCompile(`^gpuslice: cannot attach to session '([^']*)' at (\S+): (.+); GPU allocations will fail$`)

// wantFailClosed checks the one stderr line of a process that could not
// attach and returns its reason.
func wantFailClosed(t testing.TB, r probe.Result, session, sock string) string {
	t.Helper()
	lines := r.StderrLines()
	if len(lines) != 1 {
		t.Fatalf("want exactly one stderr line, got %d:\n%s", len(lines), r.Stderr)
	}
	m := failLine.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("stderr line %q is not the attach-failure line", lines[0])
	}
	if m[1] != session || m[2] != sock {
		t.Fatalf("stderr line names session %q at %q, want %q at %q", m[1], m[2], session, sock)
	}
	return m[3]
}

// hooksDef parses native/interceptor/hooks.def.
type hookEntry struct {
	Lib, Base, Symbol string
	Version           int
	PTDS              bool
}

var hookRe = regexp.MustCompile(`^GS_HOOK\((CU|NVML),\s*(\w+),\s*(\w+),\s*(\d+),\s*([01]),`)

func hooksDef(t *testing.T) []hookEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "native", "interceptor", "hooks.def"))
	if err != nil {
		t.Fatal(err)
	}
	var out []hookEntry
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "GS_HOOK(") {
			continue
		}
		m := hookRe.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("hooks.def: cannot parse %q", l)
		}
		var v int
		fmt.Sscan(m[4], &v)
		out = append(out, hookEntry{Lib: m[1], Base: m[2], Symbol: m[3], Version: v, PTDS: m[5] == "1"})
	}
	if len(out) == 0 {
		t.Fatal("hooks.def lists nothing")
	}
	return out
}

// tsvRow is one row of the CUDA driver entry-point table.
type tsvRow struct {
	Base, Versions, Default, PTDS string
}

func entryPointsTSV(t *testing.T) (string, map[string]tsvRow) {
	t.Helper()
	root := testenv.RepoRoot(t)
	path := filepath.Join(root, "native", "fakecuda", "entry-points.tsv")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(root, "..", "shared", "data", "cuda-driver-entry-points.tsv")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("entry-point table: %v", err)
	}
	rows := map[string]tsvRow{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "base_name\t") {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("%s: bad row %q", path, l)
		}
		rows[f[0]] = tsvRow{Base: f[0], Versions: f[1], Default: f[2], PTDS: f[3]}
	}
	if len(rows) < 400 {
		t.Fatalf("%s: only %d rows", path, len(rows))
	}
	return path, rows
}

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
