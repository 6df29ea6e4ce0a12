// Package cli implements the gpuslice command: allocate, status, release,
// list, report, gpus and run, over the admin API (internal/client).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitUsage       = 1 // bad command line
	ExitNotFound    = 2 // no such session / report
	ExitRefused     = 3 // quota exceeded: admission refused
	ExitUnavailable = 4 // gpusliced not reachable
	ExitConflict    = 5 // session exists with another owner or quotas
	ExitError       = 6 // any other error
)

// ExitCode maps an error to the command's exit code (once, for every command).
func ExitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), errors.Is(err, pflag.ErrHelp):
		return ExitUsage
	case errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrNotYours):
		return ExitNotFound
	case errors.Is(err, client.ErrQuotaExceeded):
		return ExitRefused
	case errors.Is(err, client.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, client.ErrConflict):
		return ExitConflict
	case errors.Is(err, client.ErrBadRequest):
		return ExitUsage
	default:
		return ExitError
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// env holds what a command needs from its surroundings.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	adminSock      string
	ipcSock        string
	json           bool
	getenv         func(string) string
}

// show prints v as JSON under --json, else in human form.
func (e *env) show(v any, human func(io.Writer)) error {
	if e.json {
		return e.printJSON(v)
	}
	human(e.stdout)
	return nil
}

func (e *env) client() *client.Client { return client.New(e.adminSock) }

type command struct {
	name, args, short, long string
	flags                   func(fs *pflag.FlagSet, e *env) func(args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"allocate", "[flags] ID", "create a session with a GPU-memory quota",
			"Creates session ID (a Slurm job id or any name of 1..63 characters from A-Z a-z 0-9 . _ -)\n" +
				"for --uid with --gpu-mem per GPU. Creating the same session again with the same owner and\n" +
				"quota succeeds and changes nothing.", allocateCmd},
		{"status", "[flags] [ID]", "show a job: quota, used and peak per GPU, live processes", statusLong, statusCmd},
		{"update", "[flags] ID", "change a live session's quota, TTL or GPU time share", updateLong, updateCmd},
		{"release", "[flags] ID", "release a session and print its report", "", releaseCmd},
		{"list", "[flags]", "list live sessions (--mine: your running and finished jobs)", listLong, listCmd},
		{"report", "[flags] ID", "show the report of a released session (e.g. a finished job)", reportLong, reportCmd},
		{"seff", "[flags] JOBID", "a finished job's GPU memory efficiency from Slurm's accounting (like seff)", seffLong, seffCmd},
		{"gpus", "[flags]", "show the node's GPUs with committed quotas", "", gpusCmd},
		{"top", "[flags]", "live view of the node's GPUs and jobs (like nvtop)", topLong, topCmd},
		slurmConfigCommand,
		slurmPluginCommand,
		{"run", "[flags] [--] COMMAND [ARGS...]", "run a command under a private quota",
			"Creates a private session owned by the caller, runs COMMAND with the interceptor preloaded\n" +
				"(LD_PRELOAD, appended to any existing one) and GPUSLICE_SESSION / GPUSLICE_IPC_SOCK set,\n" +
				"forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2/SIGALRM to it; when it exits, kills what it\n" +
				"left running in the run's cgroup, releases the session and exits with its exit code (128+N when\n" +
				"killed by signal N). Never shares a session or cgroup with another run (exit 5). Needs access\n" +
				"to the admin socket.", runCmd},
	}
}

const exitCodesHelp = `Exit codes: 0 ok, 1 usage error, 2 not found, 3 quota exceeded (refused),
4 gpusliced unavailable, 5 conflict, 6 other error; run passes the command's code through.`

func topUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "gpuslice: per-job GPU-memory quotas (talks to gpusliced).\n\nUsage:\n  gpuslice [global flags] COMMAND [flags] [args]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\nGlobal flags:\n%s\nSizes: a number with K, M, G or T (powers of 1024; also KiB..TiB, B for bytes);\na bare number is megabytes, as in Slurm's --mem. Examples: 8G, 512M, 4GiB.\n%s\n\nRun 'gpuslice COMMAND --help' for a command's flags.\n", fs.FlagUsages(), exitCodesHelp)
}

// Main runs the gpuslice command line and returns its exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	global := pflag.NewFlagSet("gpuslice", pflag.ContinueOnError)
	global.SetOutput(stderr)
	global.SetInterspersed(false)
	defAdmin := client.DefaultSocket
	if v := os.Getenv("GPUSLICE_ADMIN_SOCK"); v != "" {
		defAdmin = v
	}
	defIPC := "/run/gpuslice/ipc.sock"
	if v := os.Getenv("GPUSLICE_IPC_SOCK"); v != "" {
		defIPC = v
	}
	global.StringVar(&e.adminSock, "admin-socket", defAdmin, "gpusliced admin socket (env GPUSLICE_ADMIN_SOCK)")
	global.StringVar(&e.ipcSock, "ipc-socket", defIPC, "gpusliced IPC socket given to run's command (env GPUSLICE_IPC_SOCK)")
	showVersion := global.Bool("version", false, "print the version and exit")
	global.Usage = func() {
		if helpAsked(args) {
			topUsage(stdout, global)
		} else {
			topUsage(stderr, global)
		}
	}
	if err := global.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		fmt.Fprintf(stderr, "gpuslice: %v\nRun 'gpuslice --help' for usage.\n", err)
		return ExitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("gpuslice"))
		return ExitOK
	}
	rest := global.Args()
	if len(rest) == 0 {
		topUsage(stderr, global)
		return ExitUsage
	}
	name := rest[0]
	switch name {
	case "help":
		if len(rest) > 1 {
			return Main(append([]string{rest[1]}, "--help"), stdin, stdout, stderr)
		}
		global.SetOutput(stdout)
		topUsage(stdout, global)
		return ExitOK
	case "version":
		fmt.Fprintln(stdout, version.String("gpuslice"))
		return ExitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "gpuslice: unknown command %q (run 'gpuslice --help')\n", name)
		return ExitUsage
	}
	fs := pflag.NewFlagSet("gpuslice "+cmd.name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	run := cmd.flags(fs, e)
	usageOut := stderr
	if helpAsked(rest[1:]) {
		usageOut = stdout // asked for: print where it can be paged
	}
	fs.Usage = func() {
		fmt.Fprintf(usageOut, "Usage: gpuslice %s %s\n\n%s.\n", cmd.name, cmd.args, cmd.short)
		if cmd.long != "" {
			fmt.Fprintf(usageOut, "\n%s\n", cmd.long)
		}
		fmt.Fprintf(usageOut, "\nFlags:\n%s\n%s\n", fs.FlagUsages(), exitCodesHelp)
	}
	if err := fs.Parse(rest[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		fmt.Fprintf(stderr, "gpuslice %s: %v\nRun 'gpuslice %s --help' for usage.\n", cmd.name, err, cmd.name)
		return ExitUsage
	}
	err := run(fs.Args())
	var ce childExit
	if errors.As(err, &ce) {
		return int(ce)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuslice %s: %v\n", cmd.name, err)
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "Run 'gpuslice %s --help' for usage.\n", cmd.name)
		}
	}
	return ExitCode(err)
}

// helpAsked reports whether -h/--help appears before "--" or the command.
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}

// childExit carries run's pass-through exit code.
type childExit int

func (c childExit) Error() string { return "exit " + strconv.Itoa(int(c)) }

func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func jsonFlag(fs *pflag.FlagSet, e *env) {
	fs.BoolVar(&e.json, "json", false, "print JSON")
}

func oneID(args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef("expected one session ID, got %d arguments", len(args))
	}
	return args[0], nil
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// quotaFlags are shared by allocate and run.
type quotaFlags struct {
	gpuMem  string
	gpus    string
	ttl     string
	compute computeFlags
	fs      *pflag.FlagSet
}

func (q *quotaFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&q.gpuMem, "gpu-mem", "", "quota per GPU, e.g. 8G, 512M (required)")
	fs.StringVar(&q.gpus, "gpus", "", "comma-separated GPU indices or UUIDs (default: every GPU of the node)")
	fs.StringVar(&q.ttl, "ttl", "", "time to live, e.g. 12h or seconds (default: the daemon's default_ttl)")
	q.compute.register(fs)
	q.fs = fs
}

func (q *quotaFlags) request(id string, uid uint32) (client.SessionRequest, error) {
	req := client.SessionRequest{ID: id, UID: uid}
	if q.gpuMem == "" {
		return req, usagef("--gpu-mem is required (e.g. --gpu-mem 8G)")
	}
	b, err := size.Parse(q.gpuMem)
	if err != nil {
		return req, usagef("--gpu-mem: %v", err)
	}
	if b == 0 {
		return req, usagef("--gpu-mem must be more than 0")
	}
	req.QuotaBytes = b
	if q.gpus != "" {
		for _, g := range strings.Split(q.gpus, ",") {
			if g = strings.TrimSpace(g); g != "" {
				req.GPUs = append(req.GPUs, g)
			}
		}
	}
	if q.ttl != "" {
		ttl, err := parseTTL(q.ttl)
		if err != nil {
			return req, err
		}
		req.TTLSeconds = ttl
	}
	req.Compute, err = q.compute.spec(q.fs, nil)
	return req, err
}

func parseTTL(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, usagef("--ttl %q: use a duration such as 30m or 12h, or seconds", s)
	}
	return int64(d / time.Second), nil
}

func allocateCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	var q quotaFlags
	uid := fs.Int64("uid", int64(os.Getuid()), "owner uid: only this user (and root) may attach")
	q.register(fs)
	jsonFlag(fs, e)
	return func(args []string) error {
		id, err := oneID(args)
		if err != nil {
			return err
		}
		if *uid < 0 || *uid > 1<<32-1 {
			return usagef("--uid %d out of range", *uid)
		}
		req, err := q.request(id, uint32(*uid))
		if err != nil {
			return err
		}
		ctx, cancel := ctxTimeout()
		defer cancel()
		s, err := e.client().CreateSession(ctx, req)
		if err != nil {
			return err
		}
		return e.show(s, func(w io.Writer) { printSession(w, s) })
	}
}

func releaseCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	return reportByID(fs, e, (*client.Client).DeleteSession)
}

// reportByID is release and report: one session id in, a report out.
func reportByID(fs *pflag.FlagSet, e *env, fetch func(*client.Client, context.Context, string) (*client.Report, error)) func([]string) error {
	jsonFlag(fs, e)
	return func(args []string) error {
		id, err := oneID(args)
		if err != nil {
			return err
		}
		ctx, cancel := ctxTimeout()
		defer cancel()
		r, err := fetch(e.client(), ctx, id)
		if err != nil {
			return err
		}
		return e.show(r, func(w io.Writer) { printReport(w, r) })
	}
}

func gpusCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	return tableCmd(fs, e, "gpus", (*client.Client).GPUs, printGPUTable)
}

// tableCmd is a read without arguments: fetch, then JSON or a table.
func tableCmd[T any](fs *pflag.FlagSet, e *env, name string, fetch func(*client.Client, context.Context) (T, error),
	table func(io.Writer, T) error) func([]string) error {
	jsonFlag(fs, e)
	return func(args []string) error {
		if len(args) != 0 {
			return usagef("%s takes no arguments", name)
		}
		ctx, cancel := ctxTimeout()
		defer cancel()
		v, err := fetch(e.client(), ctx)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(v)
		}
		return table(e.stdout, v)
	}
}
