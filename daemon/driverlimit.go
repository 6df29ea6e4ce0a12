package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/size"
)

// driverLimits puts each Slurm job's quota, as the driver's own hard
// memory limit (NVML's nvmlDeviceSetMemoryLimits_v1, R615+), on the job's
// cgroup v2 directory, on the GPUs whose driver has such limits
// (docs/compute-share.md "The driver's own memory limit"). The directory is
// <slurm_cgroup_root>/<SLUID> for a session the Prolog created with a
// SLUID (Slurm 26.05), else <slurm_cgroup_root>/job_<id>: both from the
// configuration and from what the root Prolog gave, nothing a job writes.
// Nothing here fails a session or the daemon: an error is logged and
// counted, and the interceptor and the audit hold the quota as they do
// on a GPU without driver limits.
type driverLimits struct {
	ml         *gpu.MemLimits
	gpus       []gpu.GPU
	root       string
	jobIDPaths bool
	log        *slog.Logger
	count      func(op string, err error) // metrics; nil: none
}

// openDriverLimits finds, per GPU, whether the driver enforces memory
// limits per cgroup, and marks gpus[i].DriverLimit. nil when no GPU has
// them or slurm_cgroup_root is empty (then every GPU is interceptor-only).
func openDriverLimits(cfg config.Config, log *slog.Logger, gpus []gpu.GPU) *driverLimits {
	if len(gpus) == 0 {
		return nil
	}
	if cfg.SlurmCgroupRoot == "" {
		log.Info("driver memory limits off (slurm_cgroup_root is empty): quotas are enforced by the interceptor and the audit")
		return nil
	}
	ml, err := gpu.OpenMemLimits(cfg.NVMLLibrary, gpus)
	if err != nil {
		lvl := slog.LevelWarn
		if errors.Is(err, gpu.ErrNoMemLimits) {
			lvl = slog.LevelInfo
		}
		log.Log(context.Background(), lvl, "driver memory limits unavailable: quotas are enforced by the interceptor and the audit", "reason", err)
		return nil
	}
	probe := probePath(cfg.SlurmCgroupRoot)
	any := false
	for i := range gpus {
		ok, perr := ml.Probe(i, probe)
		gpus[i].DriverLimit = ok
		any = any || ok
		log.Info("gpu enforcement", "index", i, "uuid", gpus[i].UUID, "enforcement", gpus[i].Enforcement(),
			"probe", probe, "nvml", errText(perr))
	}
	if !any {
		ml.Close()
		return nil
	}
	return &driverLimits{ml: ml, gpus: gpus, root: cfg.SlurmCgroupRoot, jobIDPaths: cfg.SlurmCgroupJobIDPaths, log: log}
}

// probePath is the cgroup the start-up probe reads the limits of (a read,
// never a change): Slurm's cgroup root when it exists, else the cgroup v2
// hierarchy's root (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid
// host).
func probePath(root string) string {
	if st, err := os.Stat(root); err == nil && st.IsDir() {
		return root
	}
	return filepath.Join("/sys/fs/cgroup", identity.V2Dir("/sys/fs/cgroup"))
}

func errText(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// Close releases the NVML handle.
func (d *driverLimits) Close() {
	if d != nil {
		d.ml.Close()
	}
}

// jobDir is the cgroup directory of the session's job; false when the
// session is not a Slurm job's (its id is not a job id).
func (d *driverLimits) jobDir(rec store.Record) (string, bool) {
	if rec.SLUID != "" && !d.jobIDPaths {
		return filepath.Join(d.root, rec.SLUID), true
	}
	if !isJobID(rec.ID) {
		return "", false
	}
	return filepath.Join(d.root, "job_"+rec.ID), true
}

// isJobID: a Slurm job id (a uint32 in decimal).
func isJobID(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

type gpuLimit struct {
	idx   int
	bytes uint64
}

// limited lists the session's GPUs whose driver has memory limits.
func (d *driverLimits) limited(rec store.Record, gidx []int) []gpuLimit {
	var out []gpuLimit
	for g, uuid := range rec.GPUs {
		if g < len(gidx) && gidx[g] >= 0 && gidx[g] < len(d.gpus) && d.gpus[gidx[g]].DriverLimit {
			out = append(out, gpuLimit{gidx[g], rec.Limits[uuid]})
		}
	}
	return out
}

func (d *driverLimits) counted(op string, err error) {
	if d.count != nil {
		d.count(op, err)
	}
}

// target is what Apply and Remove act on: the session's GPUs whose driver
// has limits and its job's cgroup directory; ok false when there is none
// (no such GPU, or not a Slurm job's session).
func (d *driverLimits) target(rec store.Record, gidx []int) (ls []gpuLimit, dir string, ok bool) {
	if d == nil {
		return nil, "", false
	}
	if ls = d.limited(rec, gidx); len(ls) == 0 {
		return nil, "", false
	}
	if dir, ok = d.jobDir(rec); !ok {
		d.log.Debug("driver memory limit: the session is not a Slurm job's", "session", rec.ID)
	}
	return ls, dir, ok
}

// Apply sets the hard limit (soft 0) of each of the session's GPUs on
// its job's cgroup, making the directory when Slurm has not yet (the
// Prolog runs before the job's first step; slurmstepd takes an existing
// directory as its own). Soft 0: a soft limit is what the driver
// guarantees the cgroup under memory pressure, and gpusliced's admission
// already guarantees the quota; a soft limit could only let the driver
// refuse the job below its quota.
func (d *driverLimits) Apply(rec store.Record, gidx []int) {
	ls, dir, ok := d.target(rec, gidx)
	if !ok {
		return
	}
	if err := enableDmem(d.root); err != nil {
		d.log.Debug("dmem controller not enabled above the job's cgroup", "cgroup", d.root, "err", err)
	}
	if err := ensureCgroupDir(dir); err != nil {
		d.log.Warn("driver memory limit not set: the interceptor and the audit enforce the quota", "session", rec.ID, "cgroup", dir, "err", err)
		for range ls {
			d.counted("set", err)
		}
		return
	}
	for _, l := range ls {
		err := d.ml.Set(l.idx, dir, l.bytes)
		d.counted("set", err)
		if err != nil {
			d.log.Warn("driver memory limit not set: the interceptor and the audit enforce the quota", "session", rec.ID,
				"gpu", l.idx, "cgroup", dir, "limit", size.Format(l.bytes), "err", err)
			continue
		}
		d.log.Info("driver memory limit set", "session", rec.ID, "gpu", l.idx, "cgroup", dir, "limit", size.Format(l.bytes))
	}
}

// Remove clears the session's limits (a cgroup already gone took its
// limits with it) and removes the job's directory when it is empty: one
// gpusliced made for a job that never started a step there, or one Slurm
// left; a directory still in use (processes, step directories) stays.
func (d *driverLimits) Remove(rec store.Record, gidx []int) {
	ls, dir, ok := d.target(rec, gidx)
	if !ok {
		return
	}
	for _, l := range ls {
		err := d.ml.Clear(l.idx, dir)
		var me *gpu.MemLimitError
		if errors.As(err, &me) && me.NotFound() {
			err = nil
		}
		d.counted("clear", err)
		if err != nil {
			d.log.Warn("driver memory limit not cleared", "session", rec.ID, "gpu", l.idx, "cgroup", dir, "err", err)
		} else {
			d.log.Info("driver memory limit cleared", "session", rec.ID, "gpu", l.idx, "cgroup", dir)
		}
	}
	if err := unix.Rmdir(dir); err == nil {
		d.log.Debug("job cgroup removed", "session", rec.ID, "cgroup", dir)
	}
}

// enableDmem enables the kernel's dmem controller (device memory, Linux
// 6.14+), which backs the driver's limits, for the children of every
// cgroup from the cgroup v2 root down to root (Slurm's cgroup root):
// Slurm enables only the controllers it knows, and a job cgroup without
// dmem has no dmem files for the driver to use. A controller the kernel
// does not offer there (no dmem, or a driver that keeps its own
// accounting) is left alone; nil when dmem is on all the way or absent.
func enableDmem(root string) error {
	mnt := root
	for {
		var st unix.Statfs_t
		parent := filepath.Dir(mnt)
		if parent == mnt || unix.Statfs(parent, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			break
		}
		mnt = parent
	}
	rel, err := filepath.Rel(mnt, root)
	if err != nil {
		return err
	}
	dir := mnt
	for _, c := range append([]string{""}, strings.Split(rel, "/")...) {
		if c != "" && c != "." {
			dir = filepath.Join(dir, c)
		}
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return err
		}
		if !slices.Contains(strings.Fields(string(ctl)), "dmem") {
			return nil // not offered here, nor below
		}
		sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(string(sub)), "dmem") {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+dmem"), 0); err != nil {
			return fmt.Errorf("enable dmem in %s: %w", dir, err)
		}
	}
	return nil
}

// ensureCgroupDir makes dir (root's, 0755) when missing; an existing one
// must be a directory owned by root, as Slurm makes them, in a cgroup v2
// hierarchy (a slurm_cgroup_root that is not one gets no directory made).
func ensureCgroupDir(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &fs); err != nil {
		return fmt.Errorf("slurm_cgroup_root: %w", err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not in a cgroup v2 hierarchy", filepath.Dir(dir))
	}
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := unix.Mkdir(dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("make the job's cgroup: %w", err)
		}
		st, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 0 {
		return fmt.Errorf("%s is not owned by root", dir)
	}
	return nil
}
