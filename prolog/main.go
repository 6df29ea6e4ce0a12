package prolog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/gpuslice/gpuslice/internal/version"
)

// Mode selects the program.
type Mode int

// The two programs.
const (
	ModeProlog Mode = iota
	ModeEpilog
)

func (m Mode) name() string {
	if m == ModeEpilog {
		return "gpuslice-epilog"
	}
	return "gpuslice-prolog"
}

// Main is the whole program behind cmd/gpuslice-prolog and
// cmd/gpuslice-epilog: it returns the exit status. slurmd runs the program
// with no PATH and without its own environment, so the admin socket comes
// from flags or gpusliced's configuration file (admin_socket, or
// <runtime_dir>/admin.sock), as gpusliced itself resolves it.
func Main(mode Mode, args []string, getenv func(string) string, stderr io.Writer) int {
	prog := mode.name()
	logw := prefixWriter{w: stderr, prefix: prog + ": "}
	fs := pflag.NewFlagSet(prog, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", "", "gpusliced configuration file, read for admin_socket (default "+config.DefaultFile+" if it exists)")
	adminSock := fs.String("admin-socket", "", "gpusliced admin socket (overrides the configuration file and GPUSLICE_ADMIN_SOCK)")
	retry := fs.Duration("retry-timeout", 10*time.Second, "how long to retry while gpusliced is unreachable (restarting)")
	ttl := fs.Duration("ttl", 0, "TTL of the job's session (0: gpusliced's default_ttl): how long it may stay without a live process")
	refusalDir := fs.String("refusal-dir", "", "where a refused job's reason is left for the SPANK plugin (default: "+RefusalDirName+
		" next to the admin socket given by --admin-socket, else under gpusliced's runtime_dir)")
	scontrol := fs.String("scontrol", "", "ignored: the Prolog asks Slurm nothing (earlier releases asked scontrol about whole GPUs)")
	_ = fs.MarkHidden("scontrol")
	def := fs.String("default", "", "quota of jobs submitted without --gpu-mem when SPANK_GPU_MEM is unset (empty: none)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	var ignored []string // the Epilog's flags of earlier releases
	if mode == ModeEpilog {
		ignored = ignoredEpilogFlags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s [flags]\n\nRun by slurmd as the %s (see docs/slurm.md).\n\nFlags:\n%s",
			prog, map[Mode]string{ModeProlog: "Prolog", ModeEpilog: "Epilog"}[mode], fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(logw, "%v (see --help)\n", err)
		return 2
	}
	if fs.Changed("scontrol") {
		fmt.Fprintf(logw, "--scontrol %s is ignored: %s runs no Slurm command (remove the flag from slurm.conf)\n", *scontrol, prog)
	}
	for _, f := range ignored {
		if fs.Changed(f) {
			fmt.Fprintf(logw, "--%s is ignored: gpusliced records the job's figures in Slurm's accounting (remove it from slurm.conf)\n", f)
		}
	}
	if *showVersion {
		fmt.Fprintln(stderr, version.String(prog))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(logw, "unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var defBytes uint64
	if *def != "" {
		b, err := size.Parse(*def)
		if err != nil || b == 0 {
			fmt.Fprintf(logw, "--default %q: expected a positive size such as 8G\n", *def)
			return 2
		}
		defBytes = b
	}

	job, err := JobFromEnv(getenv, defBytes)
	if err != nil {
		fmt.Fprintf(logw, "%v\n", err)
		if mode == ModeEpilog && !errors.Is(err, ErrNoJob) {
			return 0 // never drain a node over an Epilog's input
		}
		return 1
	}
	if job.QuotaBytes == 0 {
		return 0 // no quota asked: nothing to do, and no daemon needed
	}
	if mode == ModeProlog && DefaultQuotaWaived(job, getenv) {
		fmt.Fprintf(logw, "job %s: whole GPUs without --gpu-mem: no quota (default= applies to shares of a GPU)\n", job.ID)
		return 0
	}
	if v := getenv(EnvSLUID); mode == ModeProlog && v != "" && job.SLUID == "" {
		fmt.Fprintf(logw, "job %s: %s=%q is not a SLUID; the session gets none\n", job.ID, EnvSLUID, v)
	}

	if *ttl < 0 || (*ttl > 0 && *ttl < time.Second) {
		fmt.Fprintf(logw, "--ttl %v: expected 0 or at least 1s\n", *ttl)
		return 2
	}
	cfg := Config{RetryTimeout: *retry, CallTimeout: 5 * time.Second, TTL: *ttl, Log: logw}
	cfg.AdminSocket = *adminSock
	cfg.RefusalDir = *refusalDir
	if cfg.AdminSocket != "" && cfg.RefusalDir == "" {
		cfg.RefusalDir = filepath.Join(filepath.Dir(cfg.AdminSocket), RefusalDirName)
	}
	if cfg.AdminSocket == "" {
		cargs := []string{}
		if *configFile != "" {
			cargs = append(cargs, "--config", *configFile)
		}
		dc, err := config.Load(cargs, io.Discard)
		if err != nil {
			fmt.Fprintf(logw, "job %s: %v\n", job.ID, err)
			if mode == ModeEpilog {
				return 0
			}
			return 1
		}
		cfg.AdminSocket = dc.AdminSocket
		if cfg.RefusalDir == "" {
			cfg.RefusalDir = filepath.Join(dc.RuntimeDir, RefusalDirName)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if mode == ModeEpilog {
		if job.Node == "" { // run by hand: this machine's name, as slurmd's default
			host, _ := os.Hostname()
			job.Node, _, _ = strings.Cut(host, ".")
		}
		job.Refused = Refused(cfg.RefusalDir, job.ID)
		Epilog(ctx, cfg, job) // one call to gpusliced, no Slurm command
		if err := RemoveRefusal(cfg.RefusalDir, job.ID); err != nil {
			fmt.Fprintf(logw, "job %s: %v\n", job.ID, err)
		}
		return 0
	}
	err = Prolog(ctx, cfg, job)
	if err == nil {
		// A refusal left by an earlier run of this job id (requeue) no
		// longer applies.
		if rerr := RemoveRefusal(cfg.RefusalDir, job.ID); rerr != nil {
			fmt.Fprintf(logw, "job %s: %v\n", job.ID, rerr)
			return 1
		}
		return 0
	}
	fmt.Fprintf(logw, "job %s: %v\n", job.ID, err)
	if Infrastructure(err) {
		return 1 // gpusliced down or failing: the node is unhealthy
	}
	// A decision about this job's quota: the job fails, not the node.
	if werr := WriteRefusal(cfg.RefusalDir, job.ID, RefusalMessage(job, getenv("SLURMD_NODENAME"), err)); werr != nil {
		fmt.Fprintf(logw, "job %s: cannot record the refusal for the job: %v\n", job.ID, werr)
		return 1
	}
	fmt.Fprintf(logw, "job %s: refused; the job fails when its tasks start (reason in %s)\n", job.ID, cfg.RefusalDir)
	return 0
}

// prefixWriter starts every write with the program's name (one Fprintf is
// one line here).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
