package interceptor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The refusal line (docs/interceptor.md "When the quota refuses"): what
// the user reads on stderr when the quota refuses an allocation.
var refusalLine = regexp.MustCompile(`^gpuslice: (job|session) (\S+): an allocation of (\S+) on GPU (\d+) was refused: ` +
	`the job holds (\S+) of its (\S+) quota on that GPU \(([^)]*)\)\. CUDA reports out of memory\. ` +
	`More: gpuslice status (\S+)( \(no more of these lines from this process\))?$`)

// noticeLimit is GS_NOTICE_LINES (native/interceptor/notice.c).
const noticeLimit = 5

// noticeSession starts gpusliced (one 80 GiB GPU) with a session of quota
// bytes named id and returns the environment of a process in it.
func noticeSession(t *testing.T, id string, quota uint64, extra ...string) []string {
	t.Helper()
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB"})
	if _, err := d.Client().CreateSession(testenv.Context(t), client.SessionRequest{ID: id, QuotaBytes: quota}); err != nil {
		t.Fatalf("create session: %v", err)
	}
	env := append(d.Env(), "LD_PRELOAD="+probe.Lib(t), "GPUSLICE_SESSION="+id)
	return append(env, extra...)
}

// refusals checks that every stderr line is a whole refusal line and
// returns their matches.
func refusals(t *testing.T, r probe.Result) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range r.StderrLines() {
		m := refusalLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("stderr line is not a whole refusal line: %q\nstderr:\n%s", l, r.Stderr)
		}
		out = append(out, m)
	}
	return out
}

func wantRC(t *testing.T, r probe.Result, step string, i int, rc string) {
	t.Helper()
	if got := r.Find(t, step, i).Get("rc"); got != rc {
		t.Fatalf("%s #%d: rc=%s, want %s\nstdout:\n%s\nstderr:\n%s", step, i, got, rc, r.Stdout, r.Stderr)
	}
}

// The first refusal of a process says which job, which GPU, what was
// asked, what the job holds of which quota, the --gpu-mem that set it and
// where to look; CUDA's answer is still CUDA_ERROR_OUT_OF_MEMORY (2).
func TestRefusalExplainsItself(t *testing.T) {
	id := fmt.Sprint(4200000 + os.Getpid()%100000)
	env := noticeSession(t, id, 256<<20, "GPUSLICE_GPU_MEM=256M")
	r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:200M", "alloc:100M")
	wantRC(t, r, "alloc", 0, "0")
	wantRC(t, r, "alloc", 1, "2")
	got := refusals(t, r)
	if len(got) != 1 {
		t.Fatalf("want one refusal line, got %d:\n%s", len(got), r.Stderr)
	}
	m := got[0]
	want := []string{"job", id, "100MiB", "0", "200MiB", "256MiB", "--gpu-mem=256M; the GPU itself has 80GiB", id, ""}
	for i, w := range want {
		if m[i+1] != w {
			t.Errorf("field %d of the refusal line is %q, want %q\n%s", i+1, m[i+1], w, m[0])
		}
	}

	t.Run("a session outside Slurm, no --gpu-mem known", func(t *testing.T) {
		env := noticeSession(t, "notice-run", 64<<20)
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:128M")
		wantRC(t, r, "alloc", 0, "2")
		got := refusals(t, r)
		if len(got) != 1 || got[0][1] != "session" || got[0][2] != "notice-run" || got[0][5] != "0B" ||
			got[0][7] != "the GPU itself has 80GiB" {
			t.Fatalf("refusal line: %q", r.Stderr)
		}
	})
	t.Run("the cluster's default quota", func(t *testing.T) {
		env := noticeSession(t, "notice-default", 64<<20, "GPUSLICE_GPU_MEM=default")
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:128M")
		got := refusals(t, r)
		if len(got) != 1 || got[0][7] != "the cluster's default; ask with --gpu-mem; the GPU itself has 80GiB" {
			t.Fatalf("refusal line: %q", r.Stderr)
		}
	})
	t.Run("what the environment says is only printed", func(t *testing.T) {
		env := noticeSession(t, "notice-env", 64<<20, "GPUSLICE_GPU_MEM=8G\x1b[2J;rm -rf")
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:128M")
		got := refusals(t, r)
		if len(got) != 1 || !strings.HasPrefix(got[0][7], "--gpu-mem=8G??2J?rm??rf;") {
			t.Fatalf("refusal line: %q", r.Stderr)
		}
	})
}

// Off for a job (the user's GPUSLICE_NOTICE) and when only the end-of-step
// lines are wanted: nothing on stderr, the same CUDA answer.
func TestRefusalLineOff(t *testing.T) {
	env := noticeSession(t, "notice-on", 64<<20)
	if r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:128M"); len(refusals(t, r)) != 1 {
		t.Fatalf("without GPUSLICE_NOTICE: want one refusal line:\n%s", r.Stderr)
	}
	for _, v := range []string{"off", "0", "summary"} {
		t.Run(v, func(t *testing.T) {
			env := noticeSession(t, "notice-off", 64<<20, "GPUSLICE_NOTICE="+v)
			r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:128M")
			wantRC(t, r, "alloc", 0, "2")
			if s := strings.TrimSpace(r.Stderr); s != "" {
				t.Fatalf("GPUSLICE_NOTICE=%s: stderr %q", v, s)
			}
		})
	}
}

// Many refusals, from one thread or from many at once: a handful of lines
// at most per process, each written whole; a child after fork has lines
// of its own, and so has a signal handler.
func TestRefusalLineRateLimited(t *testing.T) {
	env := noticeSession(t, "notice-rate", 256<<20, "GPUSLICE_GPU_MEM=256M")
	t.Run("one thread", func(t *testing.T) {
		args := []string{"alloc:200M"}
		for i := 0; i < 40; i++ {
			args = append(args, "alloc:100M")
		}
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), append(args, "freeall")...)
		for i := 1; i <= 40; i++ {
			wantRC(t, r, "alloc", i, "2")
		}
		if n := len(refusals(t, r)); n < 1 || n > noticeLimit {
			t.Fatalf("40 refusals wrote %d lines, want 1..%d:\n%s", n, noticeLimit, r.Stderr)
		}
	})
	t.Run("threads", func(t *testing.T) {
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:200M", "threads:16:100M", "threads:16:100M", "freeall")
		for i := 0; i < 2; i++ {
			if s := r.Find(t, "threads", i); s.Get("refused") != "16" {
				t.Fatalf("threads: %s", s.Line)
			}
		}
		if n := len(refusals(t, r)); n < 1 || n > noticeLimit {
			t.Fatalf("32 refusals from 16 threads wrote %d lines, want 1..%d:\n%s", n, noticeLimit, r.Stderr)
		}
	})
	t.Run("fork", func(t *testing.T) {
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:200M", "fork:100M", "alloc:100M", "freeall")
		if s := r.Find(t, "child", 0); s.Get("rc") != "2" {
			t.Fatalf("child: %s", s.Line)
		}
		wantRC(t, r, "alloc", 1, "2")
		// the child's line, then the parent's own first one
		if n := len(refusals(t, r)); n != 2 {
			t.Fatalf("a refusal in a child and then one in the parent wrote %d lines, want 2:\n%s", n, r.Stderr)
		}
	})
	t.Run("signal handler", func(t *testing.T) {
		r := probe.Run(t, env, probe.Bin(t, "gs_notice"), "alloc:200M", "signal:100M", "freeall")
		if s := r.Find(t, "signal", 0); s.Get("rc") != "2" {
			t.Fatalf("signal: %s", s.Line)
		}
		if n := len(refusals(t, r)); n != 1 {
			t.Fatalf("a refusal in a signal handler wrote %d lines, want 1:\n%s", n, r.Stderr)
		}
	})
}

// stderr closed, taken over by another file, pointed elsewhere, or a pipe
// nobody reads: the process goes on with CUDA's answer, and nothing is
// written anywhere but the stderr the process started with.
func TestRefusalLineStderr(t *testing.T) {
	env := noticeSession(t, "notice-fd", 64<<20)
	bin := probe.Bin(t, "gs_notice")
	t.Run("open", func(t *testing.T) {
		r := probe.Run(t, env, bin, "alloc:128M")
		if n := len(refusals(t, r)); n != 1 {
			t.Fatalf("want one refusal line, got %d:\n%s", n, r.Stderr)
		}
	})
	t.Run("closed", func(t *testing.T) {
		r := probe.Run(t, env, bin, "closeerr", "alloc:128M")
		wantRC(t, r, "alloc", 0, "2")
		r.Find(t, "done", 0)
	})
	for _, step := range []string{"reuseerr", "dup2err"} {
		t.Run(step, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "data")
			r := probe.Run(t, env, bin, step+":"+file, "alloc:128M")
			wantRC(t, r, "alloc", 0, "2")
			r.Find(t, "done", 0)
			if b, err := os.ReadFile(file); err != nil || len(b) != 0 {
				t.Fatalf("%s: the file now on descriptor 2 holds %q (%v)", step, b, err)
			}
			if s := strings.TrimSpace(r.Stderr); s != "" {
				t.Fatalf("%s: the original stderr got %q", step, s)
			}
		})
	}
	t.Run("pipe nobody reads", func(t *testing.T) {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "alloc:128M")
		cmd.Env = env
		cmd.Stderr = pw
		pr.Close() // the reader is gone before the refusal
		out, err := cmd.Output()
		pw.Close()
		if err != nil {
			t.Fatalf("gs_notice with stderr a pipe nobody reads: %v (SIGPIPE?)\n%s", err, out)
		}
		r := probe.Result{Stdout: string(out)}
		for _, l := range strings.Split(string(out), "\n") {
			if l != "" {
				r.Steps = append(r.Steps, probe.ParseLine(l))
			}
		}
		wantRC(t, r, "alloc", 0, "2")
		r.Find(t, "done", 0)
	})
}
