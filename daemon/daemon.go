// Package daemon wires gpusliced together: configuration, NVML inventory,
// the session database, ledgers, the IPC and admin servers, metrics, the
// reclaim watcher and the periodic sweep.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/daemon/admin"
	"github.com/gpuslice/gpuslice/daemon/audit"
	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/daemon/ipcserver"
	"github.com/gpuslice/gpuslice/daemon/metrics"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// ShutdownTimeout bounds the graceful shutdown of the HTTP servers.
const ShutdownTimeout = 5 * time.Second

// Main parses args and runs the daemon until ctx ends. It returns the
// process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) { // usage already printed
			return 0
		}
		fmt.Fprintf(stderr, "gpusliced: %v\n", err)
		return 2
	}
	if cfg.ShowVersion {
		fmt.Fprintln(stdout, version.String("gpusliced"))
		return 0
	}
	if err := Run(ctx, cfg, stderr); err != nil {
		fmt.Fprintf(stderr, "gpusliced: %v\n", err)
		return 1
	}
	return 0
}

// NewLogger returns the daemon's logger at cfg.LogLevel.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(cfg.LogLevel))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// Run runs the daemon with cfg until ctx is cancelled.
func Run(ctx context.Context, cfg config.Config, logw io.Writer) error {
	log := NewLogger(cfg, logw)
	gpus, err := gpu.Inventory(cfg.NVMLLibrary)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.RuntimeDir, 0o755); err != nil {
		return fmt.Errorf("runtime dir: %w", err)
	}
	os.Chmod(cfg.RuntimeDir, 0o755)
	ledgerDir := filepath.Join(cfg.RuntimeDir, "ledgers")
	if err := os.MkdirAll(ledgerDir, 0o700); err != nil {
		return fmt.Errorf("ledger dir: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}

	if _, _, err := checkFDLimit(log, cfg.IPCConnsPerUID); err != nil {
		return err
	}
	if len(gpus) == 0 {
		log.Warn("NVML reports no GPU; sessions cannot be created")
	}
	for _, g := range gpus {
		log.Info("gpu", "index", g.Index, "uuid", g.UUID, "name", g.Name, "bytes", g.Physical)
	}

	st, err := store.Open(filepath.Join(cfg.StateDir, "gpusliced.db"))
	if err != nil {
		return err
	}
	defer st.Close()

	// Refuse to start when another daemon answers on our sockets; remove
	// stale ones. Done before touching ledgers another daemon may own.
	ipcLn, err := listenUnix(cfg.IPCSocket, 0o666)
	if err != nil {
		return err
	}
	adminLn, err := listenUnix(cfg.AdminSocket, 0o600)
	if err != nil {
		closeUnix(ipcLn, cfg.IPCSocket)
		return err
	}
	defer closeUnix(ipcLn, cfg.IPCSocket)
	defer closeUnix(adminLn, cfg.AdminSocket)

	drv := openDriverLimits(cfg, log, gpus) // marks the GPUs whose driver enforces limits
	defer drv.Close()
	met := metrics.New(gpus)
	var drvLimits session.DriverLimits
	if drv != nil {
		drv.count = met.DriverLimitOp
		drvLimits = drv
	}
	share := openComputePage(cfg, log)
	policy, err := cfg.ComputePolicy()
	if err != nil {
		return err
	}
	// Slurm 26.05 names a job's cgroup by its SLUID: the resolver asks the
	// sessions which job has it (set once mgr exists, before any attach).
	var mgr *session.Manager
	resolver := identity.Resolver{Cache: identity.NewCache(), SLUID: func(s string) string { return mgr.JobOfSLUID(s) }}
	mgr, err = session.New(session.Options{
		LedgerDir: ledgerDir, Slots: cfg.LedgerSlots, Overcommit: cfg.Overcommit,
		DefaultTTL: cfg.DefaultTTL, HistoryRetention: cfg.HistoryRetention, Log: log,
		Identity:       resolver.JobFrom,
		ComputeAssign:  share.assign,
		ComputeChanged: share.changed,
		ComputePolicy:  &policy,
		DriverLimits:   drvLimits,
	}, gpus, st, met.Events())
	if err != nil {
		return err
	}
	w := mgr.Watcher()
	watcherDone := make(chan struct{})
	go func() { w.Run(); close(watcherDone) }()
	defer func() { w.Close(); <-watcherDone; mgr.Close() }()
	if err := mgr.Restore(); err != nil {
		return err
	}
	met.Attach(mgr, cfg.MetricsDebug)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	rec, err := startRecorder(ctx, cfg, log, st, met, &wg)
	if err != nil {
		return err
	}
	defer func() { cancel(); wg.Wait() }() // the sender stops before the database closes

	kick := audit.NewKicker() // a job refused memory its quota allowed: audit at once
	free := &gpuFree{}        // the GPUs' free memory, to tell a real refusal (set by startAudit)
	ipcSrv := ipcserver.New(mgr, ipcserver.Options{Token: cfg.IPCToken, TokenRequired: cfg.IPCTokenRequired,
		ConnsPerUID: cfg.IPCConnsPerUID, Log: log, Observe: met.ObserveIPC, Short: kick.Kick, Free: free.read,
		Compute: share.attachInfo})
	adminSrv := &http.Server{Handler: admin.Handler(mgr, rec, met.Registry, log), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ConnContext: admin.ConnContext, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var pubSrv *http.Server
	var pubLn net.Listener
	if cfg.Listen != "" {
		pubLn, err = net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", cfg.Listen, err)
		}
		pubSrv = &http.Server{Handler: admin.PublicHandler(met.Registry), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}

	errc := make(chan error, 3)
	serve := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	coster := newCtxCoster(cfg, log, mgr, &wg)
	serve("ipc server", func() error { return ipcSrv.Serve(ipcLn) })
	serve("admin server", func() error { return adminSrv.Serve(adminLn) })
	if pubSrv != nil {
		serve("metrics server", func() error { return pubSrv.Serve(pubLn) })
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(cfg.RecoveryInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mgr.Sweep()
				coster.poke(ctx)
			}
		}
	}()

	coster.poke(ctx)
	if err := startAudit(ctx, cfg, log, mgr, met, gpus, &wg, kick, free); err != nil {
		log.Warn("audit disabled: the driver's per-process figures cannot be read", "err", err)
	}
	share.start(ctx, cfg, log, mgr, gpus, met, &wg, resolver.Leaf)

	log.Info("gpusliced started", "version", version.Version, "ipc", cfg.IPCSocket, "admin", cfg.AdminSocket,
		"listen", cfg.Listen, "gpus", len(gpus), "config", cfg.File, "overcommit", cfg.Overcommit,
		"audit_interval", cfg.AuditInterval, "audit_policy", cfg.AuditPolicy)
	if cfg.IPCTokenRequired {
		log.Info("ipc token required")
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
		log.Error("server failed", "err", runErr)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer scancel()
	adminSrv.Shutdown(sctx)
	if pubSrv != nil {
		pubSrv.Shutdown(sctx)
	}
	ipcSrv.Close()
	wg.Wait()
	log.Info("stopped")
	return runErr
}

// shortAuditGap bounds how often SHORT messages (ipc.TypeShort) make the
// audit run out of turn, over all uids and GPUs: at most 100 passes a
// second more. Only attached processes are heard; a refusal found real
// asks for at most one pass per GPU per ipcserver.ShortGPUGap, any other
// SHORT for at most one per uid per ipcserver.ShortUIDGap (10 a second);
// a user with no job for none (daemon/ipcserver/short.go).
const shortAuditGap = 10 * time.Millisecond

// shortAuditConfirm is the pause before the confirming read of a pass a
// SHORT asked for (a tick's is min(audit_interval/5, 20ms)).
const shortAuditConfirm = 5 * time.Millisecond

// startAudit runs the audit loop (daemon/audit) until ctx ends.
func startAudit(ctx context.Context, cfg config.Config, log *slog.Logger, mgr *session.Manager, met *metrics.Metrics,
	gpus []gpu.GPU, wg *sync.WaitGroup, kick *audit.Kicker, free *gpuFree) error {
	if len(gpus) == 0 {
		return nil
	}
	src, err := gpu.OpenProcesses(cfg.NVMLLibrary, len(gpus))
	if err != nil {
		return err
	}
	jobs := mgr.AuditJobs()
	kill := cfg.AuditPolicy == "kill"
	var actor audit.Actor = audit.LogOnly{Log: log}
	if kill {
		actor = audit.Killer{Log: log, Jobs: jobs}
	}
	loop := &audit.Loop{Source: src, Jobs: jobs, Actor: actor, Driver: mgr.DriverMemory(), Interval: cfg.AuditInterval,
		Confirm: min(cfg.AuditInterval/5, 20*time.Millisecond), Log: log, Kick: kick, MinGap: shortAuditGap, KickConfirm: shortAuditConfirm,
		Events: audit.Events{
			Usage: mgr.ObserveAudit,
			Overrun: func(o audit.Overrun, stopped []uint32) {
				mgr.NoteOverrun(o, stopped, kill)
				met.AuditOverrun(o.GPU, len(stopped))
			},
			Pass: func(d time.Duration, err error) {
				met.AuditPass(d, err)
				if err != nil {
					log.Warn("audit pass failed", "err", err)
				}
			},
		}}
	free.set(src)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer src.Close()
		defer free.set(nil)
		loop.Run(ctx)
	}()
	return nil
}

// listenUnix listens on path with mode. An existing socket is removed only
// when nothing answers on it; a live daemon there is an error.
func listenUnix(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("another gpusliced is answering on %s; refusing to start", path)
		}
		if !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("probe existing socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if strings.Contains(err.Error(), "invalid argument") && len(path) >= 108 {
			return nil, fmt.Errorf("listen %s: path longer than a unix socket allows (108 bytes)", path)
		}
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// closeUnix closes ln and removes its socket file if it is still ours.
func closeUnix(ln *net.UnixListener, path string) {
	ln.Close()
	os.Remove(path)
}
