package compute

// Freezing: the share enforced from outside the job (docs/compute-share.md).
//
// The launch gate lives in the job's own processes, so it is a request: a
// process that calls the driver's launch by its address, runs without the
// interceptor, or never reads the gate keeps the GPU busy while its
// session is held. GPU time is measured by the driver whatever the job
// does, so gpusliced sees a held session that keeps using the GPU: once
// it has done so for FreezeAfter, the cgroups of its processes that used
// the GPU are frozen (cgroup v2 cgroup.freeze, which no process inside
// can refuse or undo) until the session is no longer held: its debt is
// paid, or it has no contender left. A well-behaved session, held at the
// gate, only finishes the kernels it had queued (milliseconds to a few
// hundred), and is never frozen.
//
// Only a task's own directory is frozen, never a job's or Slurm's
// (identity.Resolver.Leaf): Slurm suspends a job (scontrol suspend) by
// freezing each step's "user" directory above the tasks, and cgroup v2
// freezes a directory when it or any ancestor is frozen, so thawing a
// task's directory never resumes a job Slurm suspended.
//
// The guarantee: nothing stays frozen by gpusliced after the session
// ends, its share is removed, gpusliced stops, or gpusliced dies.
//   - the controller thaws a session's directories on the pass that finds
//     it released, without a share, or no longer held;
//   - Run thaws everything when its context ends (gpusliced stopping);
//   - every directory is written to the record file before it is frozen,
//     and removed from it after it is thawed, so a gpusliced that died
//     (kill -9, a crash) thaws what the record names at its next start
//     (Recover), before any job attaches.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Freezer stops and resumes the processes of a cgroup directory.
type Freezer interface {
	Freeze(dir string) error
	Thaw(dir string) error
}

// CgroupFreezer freezes cgroup v2 directories under Root, recording in
// Record which ones it froze.
type CgroupFreezer struct {
	Root   string // the cgroup v2 mount (/sys/fs/cgroup); nothing outside it is touched
	Record string // file naming the frozen directories, one per line

	mu     sync.Mutex
	frozen map[string]bool
}

func (f *CgroupFreezer) check(dir string) error {
	rel, err := filepath.Rel(f.Root, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.Clean(dir) != dir {
		return fmt.Errorf("compute share: %s is not a cgroup under %s", dir, f.Root)
	}
	return nil
}

// Freeze records dir, then freezes it.
func (f *CgroupFreezer) Freeze(dir string) error {
	if err := f.check(dir); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = map[string]bool{}
	}
	f.frozen[dir] = true
	if err := f.save(); err != nil {
		delete(f.frozen, dir)
		return err
	}
	return writeFreeze(dir, "1")
}

// writeFreeze writes v to dir's cgroup.freeze, which must exist (a
// directory that is not a cgroup gets no file).
func writeFreeze(dir, v string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.freeze"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Thaw thaws dir (a directory that is gone is thawed) and forgets it.
func (f *CgroupFreezer) Thaw(dir string) error {
	if err := f.check(dir); err != nil {
		return err
	}
	err := writeFreeze(dir, "0")
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.frozen, dir)
		err = f.save()
	}
	return err
}

// save writes the record (the caller holds mu): a new file renamed over
// the old, so a crash leaves one or the other whole.
func (f *CgroupFreezer) save() error {
	dirs := make([]string, 0, len(f.frozen))
	for d := range f.frozen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	var b strings.Builder
	for _, d := range dirs {
		b.WriteString(d + "\n")
	}
	tmp := f.Record + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("compute share: record of frozen cgroups: %w", err)
	}
	if err := os.Rename(tmp, f.Record); err != nil {
		return fmt.Errorf("compute share: record of frozen cgroups: %w", err)
	}
	return nil
}

// Recover thaws what the record names (a gpusliced that died froze them)
// and returns them; a directory that is gone is skipped.
func (f *CgroupFreezer) Recover() ([]string, error) {
	b, err := os.ReadFile(f.Record)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("compute share: record of frozen cgroups: %w", err)
	}
	f.mu.Lock()
	f.frozen = map[string]bool{}
	for _, d := range strings.Fields(string(b)) {
		f.frozen[d] = true // a bad line stays recorded, and is named below
	}
	f.mu.Unlock()
	var thawed []string
	var errs []error
	for _, d := range strings.Fields(string(b)) {
		if err := f.Thaw(d); err != nil {
			errs = append(errs, err)
			continue
		}
		thawed = append(thawed, d)
	}
	return thawed, errors.Join(errs...)
}

// ThawAll thaws every directory this freezer froze.
func (f *CgroupFreezer) ThawAll() error {
	f.mu.Lock()
	dirs := make([]string, 0, len(f.frozen))
	for d := range f.frozen {
		dirs = append(dirs, d)
	}
	f.mu.Unlock()
	var errs []error
	for _, d := range dirs {
		errs = append(errs, f.Thaw(d))
	}
	return errors.Join(errs...)
}
