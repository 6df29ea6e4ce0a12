// Package nvidia runs NVIDIA's own user-space binaries (fetched from Debian's
// contrib and non-free archive by `make nvidia-debs` into build/nvidia/root,
// never installed) on fakecuda, with and without a gpuslice quota.
package nvidia

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// rtNvidiaRoot is where `make nvidia-debs` unpacked NVIDIA's packages. The
// test skips, with apt's message, only when the archive was unreachable.
func rtNvidiaRoot(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.BuildDir(t), "nvidia")
	if b, err := os.ReadFile(filepath.Join(dir, "UNREACHABLE")); err == nil {
		msg := strings.TrimSpace(string(b))
		rtRecordSkip(t, msg)
		t.Skipf("NVIDIA's packages could not be fetched (build/nvidia/UNREACHABLE): %s", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, ".stamp")); err != nil {
		t.Fatalf("NVIDIA's packages are missing: run `make nvidia-debs` (%v)", err)
	}
	return filepath.Join(dir, "root")
}

// rtProbe is the path of a program of native/nvidia built by `make nvidia-probes`.
func rtProbe(t *testing.T, name string) string {
	t.Helper()
	rtNvidiaRoot(t)
	return testenv.Artifact(t, filepath.Join("tests", "nvidia", name))
}

// rtResult is what a probe printed: key=value lines (a key may repeat).
type rtResult struct {
	kv     map[string][]string
	stdout string
	stderr string
	code   int
}

func (r rtResult) get(key string) string {
	if v := r.kv[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func (r rtResult) uint(t *testing.T, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(r.get(key), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number (%v)\nstdout:\n%s\nstderr:\n%s", key, r.get(key), err, r.stdout, r.stderr)
	}
	return v
}

// rtRun runs a program with env and parses its output.
func rtRun(t *testing.T, env []string, name string, args ...string) rtResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not finish\nstdout:\n%s\nstderr:\n%s", name, stdout.String(), stderr.String())
	}
	r := rtResult{kv: map[string][]string{}, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run %s: %v", name, err)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r.kv[k] = append(r.kv[k], v)
		}
	}
	return r
}

// rtCheckLoaded fails unless the process mapped fakecuda's libcuda.so.1 from
// build/lib and NVIDIA's runtime from build/nvidia/root, and no other libcuda
// (the probes list their mapped CUDA libraries from /proc/self/maps).
func rtCheckLoaded(t *testing.T, r rtResult) {
	t.Helper()
	build := testenv.BuildDir(t)
	want := map[string]bool{
		filepath.Join(build, "lib", "libcuda.so.1"): false,
	}
	runtime := false
	for _, p := range r.kv["mapped"] {
		base := filepath.Base(p)
		switch {
		case strings.HasPrefix(base, "libcuda.so"):
			if _, ok := want[p]; !ok {
				t.Errorf("the process loaded a libcuda that is not fakecuda's: %s", p)
			}
			want[p] = true
		case strings.HasPrefix(base, "libcudart.so"):
			if !strings.HasPrefix(p, filepath.Join(build, "nvidia", "root")+"/") {
				t.Errorf("the process loaded a CUDA runtime that is not NVIDIA's from build/nvidia: %s", p)
			}
			runtime = true
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("fakecuda's %s is not mapped in the process; mapped: %q", p, r.kv["mapped"])
		}
	}
	if !runtime {
		t.Errorf("NVIDIA's libcudart is not mapped in the process; mapped: %q", r.kv["mapped"])
	}
}

// rtPlainEnv is the environment of a program on fakecuda alone: a private
// node state (removed at cleanup) and build/lib on the library path. The
// tests check the programs' own byte figures exactly, so a context costs no
// device memory here (tests/core/ctxcost_test.go covers that cost).
func rtPlainEnv(t *testing.T, devices string) []string {
	t.Helper()
	state := fmt.Sprintf("nvrt-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.Remove("/dev/shm/fakecuda-" + state) })
	return append(testenv.BaseEnv(),
		"LD_LIBRARY_PATH="+filepath.Join(testenv.BuildDir(t), "lib"),
		"FAKECUDA_DEVICES="+devices, "FAKECUDA_STATE="+state, "FAKECUDA_CTX_BYTES=0")
}

// rtGpuslice runs `gpuslice run --gpu-mem quota -- prog args...` against d,
// in d's environment plus env (the job's).
func rtGpuslice(t *testing.T, d *testenv.Daemon, env []string, quota string, prog string, args ...string) rtResult {
	t.Helper()
	cli := testenv.Artifact(t, "bin/gpuslice")
	full := append([]string{"--admin-socket", d.AdminSock, "--ipc-socket", d.IPCSock,
		"run", "--gpu-mem", quota, "-q", "--", prog}, args...)
	return rtRun(t, append(d.Env(), env...), cli, full...)
}

// ---- compatibility rows (build/compat/runtime.jsonl, read by `make compat`) ----

// rtCompatRow is one line of build/compat/runtime.jsonl.
type rtCompatRow struct {
	Program          string `json:"program"`
	Runs             bool   `json:"runs"`
	QuotaEnforced    bool   `json:"quota_enforced"`
	QueriesShowQuota bool   `json:"queries_show_quota"`
	Note             string `json:"note"`
}

var rtCompat struct {
	sync.Mutex
	skipped sync.Once
}

// rtRecord writes row to build/compat/runtime.jsonl in place of the row of
// the same program, keeping the other programs' rows: the file holds each
// program's latest result, whichever tests a run selected.
func rtRecord(t *testing.T, row rtCompatRow) {
	t.Helper()
	rtCompat.Lock()
	defer rtCompat.Unlock()
	dir := filepath.Join(testenv.BuildDir(t), "compat")
	path := filepath.Join(dir, "runtime.jsonl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("compat rows: %v", err)
		return
	}
	var out bytes.Buffer
	if old, err := os.ReadFile(path); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(old))
		for sc.Scan() {
			var r rtCompatRow
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.Program == row.Program {
				continue
			}
			out.Write(append(bytes.TrimSpace(sc.Bytes()), '\n'))
		}
	}
	b, err := json.Marshal(row)
	if err != nil {
		t.Errorf("compat rows: %v", err)
		return
	}
	out.Write(append(b, '\n'))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		t.Errorf("compat rows: %v", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Errorf("compat rows: %v", err)
	}
}

// rtRecordSkip records that the runtime programs could not be tried.
func rtRecordSkip(t *testing.T, why string) {
	rtCompat.skipped.Do(func() {
		for _, p := range rtPrograms {
			rtRecord(t, rtCompatRow{Program: p, Note: "not run: NVIDIA's packages could not be fetched: " + rtFirstLine(why)})
		}
	})
}

func rtFirstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// rtPrograms are the rows this part of the suite reports.
var rtPrograms = []string{rtProgramRuntime, rtProgramCublas}

const (
	rtProgramRuntime = "NVIDIA CUDA runtime 11.8 (libcudart.so.11.0)"
	rtProgramCublas  = "NVIDIA cuBLAS 11.11 (libcublas.so.11)"
)
