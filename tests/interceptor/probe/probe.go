// Package probe runs the interceptor's C test programs (build/tests/interceptor)
// and parses their key=value output. The interceptor and core suites share it.
package probe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Bin is the path of a C test program of the interceptor.
func Bin(t testing.TB, name string) string {
	t.Helper()
	return testenv.Artifact(t, filepath.Join("tests", "interceptor", name))
}

// Lib is the path of libgpuslice.so.
func Lib(t testing.TB) string {
	t.Helper()
	return testenv.Artifact(t, filepath.Join("lib", "libgpuslice.so"))
}

// Step is one output line: its first word and its key=value pairs.
type Step struct {
	Name string
	KV   map[string]string
	Line string
}

// Get returns the value of key (or "").
func (s Step) Get(key string) string { return s.KV[key] }

// need returns the value of key; it fails the test when the key is missing.
func (s Step) need(t testing.TB, key string) string {
	t.Helper()
	v, ok := s.KV[key]
	if !ok {
		t.Fatalf("line %q has no %s=", s.Line, key)
	}
	return v
}

// Int returns the value of key as an integer; it fails the test when the
// key is missing or not a number.
func (s Step) Int(t testing.TB, key string) int64 {
	t.Helper()
	v := s.need(t, key)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("line %q: %s=%q is not a number", s.Line, key, v)
	}
	return n
}

// Uint is Int for unsigned values.
func (s Step) Uint(t testing.TB, key string) uint64 {
	t.Helper()
	v := s.need(t, key)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("line %q: %s=%q is not a number", s.Line, key, v)
	}
	return n
}

// ParseLine splits "name k=v k=v" (a first word containing '=' is a pair);
// lines of the example programs ("event=alloc k=v ...") are named by their event.
func ParseLine(line string) Step {
	s := Step{KV: map[string]string{}, Line: line}
	for i, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			s.KV[k] = v
		} else if i == 0 {
			s.Name = f
		}
	}
	if s.Name == "" {
		s.Name = s.KV["event"]
	}
	return s
}

// Result is a finished run.
type Result struct {
	Steps  []Step
	Stdout string
	Stderr string
	Err    error // exit status
}

// Find returns the i-th (0-based) step named name; it fails the test when
// there is none.
func (r Result) Find(t testing.TB, name string, i int) Step {
	t.Helper()
	for _, s := range r.Steps {
		if s.Name == name {
			if i == 0 {
				return s
			}
			i--
		}
	}
	t.Fatalf("no step %q #%d in output:\n%s\nstderr:\n%s", name, i, r.Stdout, r.Stderr)
	return Step{}
}

// All returns every step named name.
func (r Result) All(name string) []Step {
	var out []Step
	for _, s := range r.Steps {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// StderrLines are the non-empty lines of stderr.
func (r Result) StderrLines() []string {
	var out []string
	for _, l := range strings.Split(r.Stderr, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func parseAll(out string) []Step {
	var steps []Step
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			steps = append(steps, ParseLine(l))
		}
	}
	return steps
}

// Run runs prog with env and args to completion (60 s at most).
func Run(t testing.TB, env []string, prog string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: timed out\nstdout:\n%s\nstderr:\n%s", prog, args, out.String(), errb.String())
	}
	return Result{Steps: parseAll(out.String()), Stdout: out.String(), Stderr: errb.String(), Err: err}
}

// Proc is a running program driven line by line over stdin/stdout.
type Proc struct {
	t     testing.TB
	Cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	mu    sync.Mutex
	out   []string
	errb  bytes.Buffer
	done  chan struct{}
	err   error
}

// Start starts prog; its output lines are read as they come.
func Start(t testing.TB, env []string, prog string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, exec.Command(prog, args...), env)
}

// StartCmd starts a prepared command (e.g. with SysProcAttr set).
func StartCmd(t testing.TB, cmd *exec.Cmd, env []string) *Proc {
	t.Helper()
	cmd.Env = env
	p := &Proc{t: t, Cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	cmd.Stderr = &syncWriter{mu: &p.mu, b: &p.errb}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin, err = cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// Expect waits (30 s at most) for the next line whose first word is name.
func (p *Proc) Expect(name string) Step {
	p.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("%s exited before %q:\n%s", p.Cmd.Path, name, p.Output())
			}
			if s := ParseLine(l); s.Name == name {
				return s
			}
		case <-timeout:
			p.t.Fatalf("%s: no %q within 30 s:\n%s", p.Cmd.Path, name, p.Output())
		}
	}
}

// Send writes one line to the program's stdin.
func (p *Proc) Send(line string) {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.stdin, line); err != nil {
		p.t.Fatalf("write to %s: %v", p.Cmd.Path, err)
	}
}

// CloseStdin closes the program's stdin.
func (p *Proc) CloseStdin() { p.stdin.Close() }

// Wait waits (60 s at most) for the program to exit and returns its status.
func (p *Proc) Wait() error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s did not exit:\n%s", p.Cmd.Path, p.Output())
		return nil
	}
}

// Done is closed when the program has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output is everything the program printed so far (stdout, then stderr).
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "stdout:\n" + strings.Join(p.out, "\n") + "\nstderr:\n" + p.errb.String()
}

// Result is what the program printed so far, parsed.
func (p *Proc) Result() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := strings.Join(p.out, "\n")
	return Result{Steps: parseAll(out), Stdout: out, Stderr: p.errb.String()}
}

// Stderr is what the program wrote to stderr so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.String()
}
