package nvidia

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The programs under test are NVIDIA's and Debian's own binaries, unpacked by
// `make nvidia-debs` under build/nvidia/root; they run on fakecuda's
// libcuda.so.1 and libnvidia-ml.so.1 from build/lib.

const toolsMiB = int64(1) << 20

// toolsRoot is build/nvidia/root. It skips the test when the Debian archive
// could not be reached (build/nvidia/UNREACHABLE holds apt's message) and
// fails it when the packages were never fetched.
func toolsRoot(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.BuildDir(t), "nvidia")
	if msg, err := os.ReadFile(filepath.Join(dir, "UNREACHABLE")); err == nil {
		t.Skipf("NVIDIA's packages are not available: %s", strings.TrimSpace(string(msg)))
	}
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, ".stamp")); err != nil {
		t.Fatalf("%s is not populated: run `make nvidia-debs`", root)
	}
	return root
}

// toolsFile is a file of the unpacked packages; the test fails when it is missing.
func toolsFile(t *testing.T, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing from the unpacked packages: %v", rel, err)
	}
	return p
}

// toolsNode is a fakecuda node of its own (a private FAKECUDA_STATE).
type toolsNode struct {
	build, devices, state string
}

func newToolsNode(t *testing.T, devices string) *toolsNode {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	n := &toolsNode{build: testenv.BuildDir(t), devices: devices,
		state: fmt.Sprintf("nvtools-%d-%s", os.Getpid(), hex.EncodeToString(b))}
	t.Cleanup(func() { os.Remove("/dev/shm/fakecuda-" + n.state) })
	return n
}

// env is a child's environment on this node: hermetic, fakecuda's libraries
// first on the library path, then extra. The tests check exact byte figures,
// so a context costs no device memory here (tests/core/ctxcost_test.go covers
// that cost).
func (n *toolsNode) env(extra ...string) []string {
	env := append(testenv.BaseEnv(), "LD_LIBRARY_PATH="+filepath.Join(n.build, "lib"),
		"FAKECUDA_DEVICES="+n.devices, "FAKECUDA_STATE="+n.state, "FAKECUDA_CTX_BYTES=0")
	return append(env, extra...)
}

// toolsResult is what a program did, with the dynamic loader's log
// (LD_DEBUG=libs) of every process it started.
type toolsResult struct {
	argv           []string
	stdout, stderr string
	code           int
	loader         string
}

// toolsExec runs argv with env, LD_DEBUG=libs written to files of its own.
func toolsExec(t *testing.T, env []string, argv ...string) toolsResult {
	t.Helper()
	return toolsExecLog(t, env, true, argv...)
}

// toolsExecLog is toolsExec; with toFiles false the loader writes its log to
// stderr, for programs that close every other descriptor at start (slurmd).
func toolsExecLog(t *testing.T, env []string, toFiles bool, argv ...string) toolsResult {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(env, "LD_DEBUG=libs")
	if toFiles {
		cmd.Env = append(cmd.Env, "LD_DEBUG_OUTPUT="+filepath.Join(dir, "ld"))
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := toolsResult{argv: argv, stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	if !toFiles {
		r.loader = r.stderr
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "ld.*"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		r.loader += string(b)
	}
	return r
}

// ok fails the test unless the program exited 0.
func (r toolsResult) ok(t *testing.T) toolsResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s exited %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.argv, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

var toolsInitRe = regexp.MustCompile(`calling init: (\S+)`)

// toolsLoaded fails unless the loader initialised every one of libs (paths)
// in the program, and no CUDA driver or NVML other than fakecuda's (in
// buildLib). Paths are compared after resolving symbolic links, so a
// program that opens libnvidia-ml.so gets credit for libnvidia-ml.so.1.
func toolsLoaded(t *testing.T, r toolsResult, buildLib string, libs ...string) {
	t.Helper()
	what := strings.Join(r.argv, " ")
	real := func(p string) string {
		if q, err := filepath.EvalSymlinks(p); err == nil {
			return q
		}
		return filepath.Clean(p)
	}
	inits := map[string]bool{}
	for _, m := range toolsInitRe.FindAllStringSubmatch(r.loader, -1) {
		inits[real(m[1])] = true
	}
	if len(inits) == 0 {
		t.Fatalf("%s: no loader log (LD_DEBUG=libs)", what)
	}
	for _, lib := range libs {
		if !inits[real(lib)] {
			t.Errorf("%s: the loader never initialised %s", what, lib)
		}
	}
	fakeDir := real(buildLib)
	for p := range inits {
		base := filepath.Base(p)
		if (strings.HasPrefix(base, "libcuda.so") || strings.HasPrefix(base, "libnvidia-ml.so")) &&
			filepath.Dir(p) != fakeDir {
			t.Errorf("%s: a driver library from outside %s was loaded: %s", what, buildLib, p)
		}
	}
}

// toolsDaemon starts the real gpusliced on a temporary socket over its own
// fakecuda node.
func toolsDaemon(t *testing.T, devices string) *testenv.Daemon {
	t.Helper()
	testenv.Artifact(t, "bin/gpuslice")
	testenv.Artifact(t, "lib/libgpuslice.so")
	return testenv.StartDaemon(t, testenv.DaemonOptions{Devices: devices})
}

// toolsInSession runs argv under `gpuslice run --gpu-mem quota` (the
// interceptor preloaded, a private session) on the daemon's node.
func toolsInSession(t *testing.T, d *testenv.Daemon, quota string, extraEnv []string, argv ...string) toolsResult {
	t.Helper()
	cli := []string{filepath.Join(d.Build, "bin", "gpuslice"), "run", "--gpu-mem", quota, "--"}
	env := append(d.Env(), "GPUSLICE_ADMIN_SOCK="+d.AdminSock)
	return toolsExec(t, append(env, extraEnv...), append(cli, argv...)...)
}

// toolsRow is one line of build/compat/<suite>.jsonl, rendered by `make
// compat` into docs/compatibility.md.
type toolsRow struct {
	Program          string `json:"program"`
	Runs             bool   `json:"runs"`
	QuotaEnforced    bool   `json:"quota_enforced"`
	QueriesShowQuota bool   `json:"queries_show_quota"`
	Note             string `json:"note"`
}

// toolsRecord appends row to build/compat/tools.jsonl when the test ran (a
// skipped test records nothing).
func toolsRecord(t *testing.T, row *toolsRow) {
	t.Helper()
	if t.Skipped() {
		return
	}
	dir := filepath.Join(testenv.BuildDir(t), "compat")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("compat results: %v", err)
		return
	}
	b, err := json.Marshal(row)
	if err != nil {
		t.Errorf("compat results: %v", err)
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "tools.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("compat results: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Errorf("compat results: %v", err)
	}
}

// toolsHolder is a fakecuda example program holding device memory in the
// background until released.
type toolsHolder struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startToolsHolder starts target_app holding bytes on device dev and waits
// until it holds them.
func startToolsHolder(t *testing.T, env []string, dev int, bytes int64) *toolsHolder {
	t.Helper()
	app := testenv.Artifact(t, filepath.Join("examples", "target_app"))
	cmd := exec.Command(app, "--api", "driver", "--device", strconv.Itoa(dev), "--step", strconv.FormatInt(bytes, 10), "--count", "1",
		"--hold", "120")
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &toolsHolder{cmd: cmd, done: make(chan struct{})}
	held := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), "event=hold") {
				held <- true
				sent = true
			}
		}
		if !sent {
			held <- false
		}
		cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(h.stop)
	select {
	case ok := <-held:
		if !ok {
			t.Fatalf("target_app did not get to hold %d bytes", bytes)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("target_app did not get to hold %d bytes", bytes)
	}
	return h
}

func (h *toolsHolder) pid() int { return h.cmd.Process.Pid }

// stop ends the hold (SIGUSR1) and waits for the program to exit.
func (h *toolsHolder) stop() {
	select {
	case <-h.done:
		return
	default:
	}
	h.cmd.Process.Signal(syscall.SIGUSR1)
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-h.done
	}
}
