// Package fakecuda tests the stand-in CUDA stack (libcuda.so.1,
// libcudart.so.12, libnvidia-ml.so.1) and the example programs by running the
// built programs as real processes against a private node-wide state.
package fakecuda

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// node is one fake GPU node: a device list and a private FAKECUDA_STATE.
type node struct {
	t       *testing.T
	build   string
	devices string
	state   string
	// ctxBytes is FAKECUDA_CTX_BYTES; "" means 0 (most tests count bytes on
	// tiny devices and do not want a context cost in their figures)
	ctxBytes string
	// attr, when set, is given to every program run (another user, a cgroup)
	attr *syscall.SysProcAttr
}

func newNode(t *testing.T, devices string) *node {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, build: testenv.BuildDir(t), devices: devices, state: "fctest-" + hex.EncodeToString(b)}
	t.Cleanup(func() { os.Remove(n.statePath()) })
	return n
}

func (n *node) statePath() string { return "/dev/shm/fakecuda-" + n.state }

func (n *node) lib() string { return filepath.Join(n.build, "lib") }

// env is the environment of a child: no inherited CUDA/fakecuda/gpuslice settings.
func (n *node) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "CUDA_VISIBLE_DEVICES", k == "LD_PRELOAD", k == "LD_LIBRARY_PATH",
			strings.HasPrefix(k, "FAKECUDA_"), strings.HasPrefix(k, "GPUSLICE_"):
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LD_LIBRARY_PATH="+n.lib(), "FAKECUDA_STATE="+n.state)
	switch n.ctxBytes {
	case "":
		env = append(env, "FAKECUDA_CTX_BYTES=0")
	case "default":
	default:
		env = append(env, "FAKECUDA_CTX_BYTES="+n.ctxBytes)
	}
	if n.devices != "" {
		env = append(env, "FAKECUDA_DEVICES="+n.devices)
	}
	return append(env, extra...)
}

// program returns the path of a built example or test program.
func (n *node) program(name string) string {
	n.t.Helper()
	for _, dir := range []string{"examples", filepath.Join("tests", "fakecuda")} {
		p := filepath.Join(n.build, dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	n.t.Fatalf("program %s is not built (run `make fakecuda`)", name)
	return ""
}

type result struct {
	stdout, stderr string
	code           int
	events         []event
}

// run runs a program to completion and parses its key=value output.
func (n *node) run(extraEnv []string, name string, args ...string) result {
	n.t.Helper()
	cmd := exec.Command(n.program(name), args...)
	cmd.Env = n.env(extraEnv...)
	cmd.SysProcAttr = n.attr
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("%s: %v", name, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code, events: parseEvents(out.String())}
}

// background is a program left running until it prints a given event.
type background struct {
	cmd    *exec.Cmd
	events chan event
	lines  []event
}

// start runs a program and waits until it prints event=<until>.
func (n *node) start(extraEnv []string, until, name string, args ...string) *background {
	n.t.Helper()
	cmd := exec.Command(n.program(name), args...)
	cmd.Env = n.env(extraEnv...)
	cmd.SysProcAttr = n.attr
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	b := &background{cmd: cmd, events: make(chan event, 256)}
	n.t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			b.cmd.Process.Kill()
			b.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if ev := parseLine(sc.Text()); ev != nil {
				b.events <- ev
			}
		}
		io.Copy(io.Discard, pipe)
		close(b.events)
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-b.events:
			if !ok {
				n.t.Fatalf("%s exited before printing event=%s (seen: %v)", name, until, b.lines)
			}
			b.lines = append(b.lines, ev)
			if ev["event"] == until {
				return b
			}
		case <-deadline:
			n.t.Fatalf("%s did not print event=%s (seen: %v)", name, until, b.lines)
		}
	}
}

func (b *background) pid() int { return b.cmd.Process.Pid }

// release ends the program's hold (SIGUSR1) and reaps it.
func (b *background) release(t *testing.T) int {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	return b.wait(t)
}

// wait reaps the program and returns its exit code.
func (b *background) wait(t *testing.T) int {
	t.Helper()
	for ev := range b.events {
		b.lines = append(b.lines, ev)
	}
	err := b.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// event is one output line: its key=value pairs.
type event map[string]string

func parseEvents(s string) []event {
	var evs []event
	for _, line := range strings.Split(s, "\n") {
		if ev := parseLine(line); ev != nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// parseLine splits `k=v k="quoted v"` pairs; lines without event= are ignored.
func parseLine(line string) event {
	ev := event{}
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				v, rest = rest[1:], ""
			} else {
				v, rest = rest[1:end+1], rest[end+2:]
			}
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		ev[k] = v
		line = rest
	}
	if ev["event"] == "" {
		return nil
	}
	return ev
}

// all returns the events of a kind.
func (r result) all(kind string) []event {
	var out []event
	for _, ev := range r.events {
		if ev["event"] == kind {
			out = append(out, ev)
		}
	}
	return out
}

// one returns the single event of a kind.
func (r result) one(t *testing.T, kind string) event {
	t.Helper()
	evs := r.all(kind)
	if len(evs) != 1 {
		t.Fatalf("want one event=%s, got %d\nstdout:\n%s\nstderr:\n%s", kind, len(evs), r.stdout, r.stderr)
	}
	return evs[0]
}

func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

func (e event) int(t *testing.T, key string) int64 {
	t.Helper()
	v, ok := e[key]
	if !ok {
		t.Fatalf("event %v has no %s", e, key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("event %v: %s=%q is not an integer", e, key, v)
	}
	return n
}

const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)
