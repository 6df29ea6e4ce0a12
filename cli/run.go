package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
)

// SystemPreload is where packages install the interceptor.
const SystemPreload = "/usr/lib/gpuslice/libgpuslice.so"

// findPreload picks the interceptor: the flag, else GPUSLICE_PRELOAD, else
// <dir of this binary>/../lib/libgpuslice.so (the build tree) or
// <dir of this binary>/../lib/gpuslice/libgpuslice.so (make install) when
// one exists, else the system path.
func findPreload(flagValue string, getenv func(string) string) (string, error) {
	p := flagValue
	if p == "" {
		p = getenv("GPUSLICE_PRELOAD")
	}
	if p == "" {
		if exe, err := os.Executable(); err == nil {
			if exe, err = filepath.EvalSymlinks(exe); err == nil {
				for _, cand := range []string{
					filepath.Join(filepath.Dir(exe), "..", "lib", "libgpuslice.so"),
					filepath.Join(filepath.Dir(exe), "..", "lib", "gpuslice", "libgpuslice.so"),
				} {
					if _, err := os.Stat(cand); err == nil {
						p = filepath.Clean(cand)
						break
					}
				}
			}
		}
	}
	if p == "" {
		p = SystemPreload
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("interceptor library %s: %w (set --preload or GPUSLICE_PRELOAD)", abs, err)
	}
	return abs, nil
}

// childEnv is the environment of run's command.
func childEnv(base []string, preload, session, ipcSock string) []string {
	out := make([]string, 0, len(base)+3)
	existing := ""
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_PRELOAD":
			existing = v
			continue
		case "GPUSLICE_SESSION", "GPUSLICE_IPC_SOCK":
			continue
		}
		out = append(out, kv)
	}
	lp := preload
	if strings.TrimSpace(existing) != "" {
		lp = existing + ":" + preload
	}
	return append(out, "LD_PRELOAD="+lp, "GPUSLICE_SESSION="+session, "GPUSLICE_IPC_SOCK="+ipcSock)
}

// runSignals are caught for the whole life of a run, from before its
// session is made until it is released: each is forwarded to the command
// while it runs, and none ends the run before its cleanup (the cgroup's
// processes killed, the cgroup removed, the session released, the
// summary printed), however often it comes. SIGPIPE is caught only so
// that a write to a closed stderr fails instead of ending the run; it is
// not forwarded.
var runSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE}

func runCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	var q quotaFlags
	q.register(fs)
	id := fs.String("id", "", "session id (default: run-<host>-<pid>); a run never shares its session or cgroup with another")
	preload := fs.String("preload", "", "interceptor library (env GPUSLICE_PRELOAD; default <bindir>/../lib/libgpuslice.so, else "+SystemPreload+")")
	quiet := fs.BoolP("quiet", "q", false, "do not print the usage summary when the command exits")
	fs.SetInterspersed(false)
	return func(args []string) error {
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, runSignals...)
		defer signal.Stop(sigs)
		if len(args) == 0 {
			return usagef("no command given (gpuslice run --gpu-mem 8G -- COMMAND ARGS...)")
		}
		lib, err := findPreload(*preload, e.getenv)
		if err != nil {
			return err
		}
		sid := *id
		if sid == "" {
			host, _ := os.Hostname()
			host, _, _ = strings.Cut(host, ".")
			sid = sanitizeID(fmt.Sprintf("run-%s-%d", host, os.Getpid()))
		}
		req, err := q.request(sid, uint32(os.Getuid()))
		if err != nil {
			return err
		}
		path, err := exec.LookPath(args[0])
		if err != nil {
			fmt.Fprintf(e.stderr, "gpuslice run: %v\n", err)
			return childExit(127)
		}
		if err := checkRunCgroup(sid); err != nil {
			return err
		}
		c := e.client()
		defer c.Close()
		// The session is this process's: gpusliced releases it (and
		// empties its cgroup) if this process is gone without doing it.
		req.CreatorPID = uint32(os.Getpid())
		ctx, cancel := ctxTimeout()
		s, err := c.CreateSession(ctx, req)
		cancel()
		if errors.Is(err, client.ErrConflict) {
			return fmt.Errorf("%w: choose another --id", err)
		}
		if err != nil {
			return err
		}
		cg, cgErr := makeRunCgroup(s.ID)
		if errors.Is(cgErr, client.ErrConflict) {
			releaseRun(e, c, s.ID, true)
			return cgErr
		}
		if cgErr != nil {
			fmt.Fprintf(e.stderr, "gpuslice run: no cgroup for the command (%v): a process of it that drops LD_PRELOAD is not attributed to session %s, and what it leaves running is not stopped\n", cgErr, s.ID)
		}
		code := -1
		for len(sigs) > 0 && code < 0 { // signalled before the command started: it does not
			if sig := (<-sigs).(syscall.Signal); sig != syscall.SIGPIPE {
				code = 128 + int(sig)
			}
		}
		if code < 0 {
			code = runChild(e, path, args, childEnv(os.Environ(), lib, s.ID, e.ipcSock), cg, sigs)
		}
		if cg != nil {
			if err := cg.remove(); err != nil {
				fmt.Fprintf(e.stderr, "gpuslice run: %v\n", err)
			}
		}
		releaseRun(e, c, s.ID, *quiet)
		return childExit(code)
	}
}

// releaseRun releases the run's session and prints its summary unless
// quiet. A process still attached (one outside the cgroup, or one whose
// exit the kernel has not finished) holds the release until it exits:
// gpusliced releases the session then, and the summary is its report.
func releaseRun(e *env, c *client.Client, id string, quiet bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := c.DeleteSession(ctx, id)
	if errors.Is(err, client.ErrConflict) {
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
			if r, herr := c.History(ctx, id); herr == nil {
				rep, err = r, nil
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "gpuslice run: release session %s: %v\n", id, err)
		return
	}
	if quiet {
		return
	}
	var parts []string
	for i, g := range rep.GPUs {
		parts = append(parts, fmt.Sprintf("GPU %d peak %s of %s", i, size.Format(g.PeakBytes), size.Format(g.LimitBytes)))
		if g.Denied > 0 {
			parts[len(parts)-1] += fmt.Sprintf(", %d allocations denied", g.Denied)
		}
	}
	fmt.Fprintf(e.stderr, "gpuslice: session %s released: %s\n", id, strings.Join(parts, "; "))
}

// runChild runs the command (in cgroup cg when there is one), forwarding
// what arrives on sigs to it until it exits, and returns its exit code
// (128+N when killed by signal N).
func runChild(e *env, path string, args, environ []string, cg *runCgroup, sigs <-chan os.Signal) int {
	cmd := exec.Command(path, args[1:]...)
	cmd.Args = args
	cmd.Env = environ
	if cg != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.fd}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.stderr, "gpuslice run: %v\n", err)
		if errors.Is(err, os.ErrPermission) {
			return 126
		}
		return 127
	}
	done := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGPIPE {
					cmd.Process.Signal(sig)
				}
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-forwarded // what comes from now on waits in sigs, unread
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(e.stderr, "gpuslice run: %v\n", err)
	return ExitError
}

func sanitizeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}
