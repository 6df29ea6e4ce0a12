package daemon

import (
	"context"
	"log/slog"
	"sync"

	"github.com/gpuslice/gpuslice/daemon/acctrecord"
	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/daemon/metrics"
	"github.com/gpuslice/gpuslice/daemon/store"
)

// startRecorder opens the queue of records for Slurm's accounting kept in
// st and runs its sender until ctx ends (daemon/acctrecord).
func startRecorder(ctx context.Context, cfg config.Config, log *slog.Logger, st *store.Store, met *metrics.Metrics,
	wg *sync.WaitGroup) (*acctrecord.Recorder, error) {
	off := func() string { return acctrecord.Off(cfg.Accounting, cfg.Sacctmgr, cfg.SlurmConf) }
	var rec *acctrecord.Recorder
	opt := acctrecord.Options{
		Slurm:    acctrecord.Slurm{Sacct: cfg.Sacct, Sacctmgr: cfg.Sacctmgr, Conf: cfg.SlurmConf},
		Off:      off,
		QueueMax: cfg.AccountingQueueMax,
		Log:      log,
		Events:   met.AccountingEvents(func() acctrecord.Stats { return rec.Stats() }),
	}
	rec, err := acctrecord.New(st, opt)
	if err != nil {
		return nil, err
	}
	if why := off(); why != "" {
		log.Info("accounting: the GPU memory figures of ended jobs are not recorded in Slurm's accounting", "why", why)
	} else {
		log.Info("accounting: the GPU memory figures of ended jobs go to Slurm's accounting", "sacctmgr", cfg.Sacctmgr,
			"slurm_conf", cfg.SlurmConf, "queue_max", cfg.AccountingQueueMax)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rec.Run(ctx)
	}()
	return rec, nil
}
