package prolog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
)

// A quota decision is never a node failure. slurmd drains the node when the
// Prolog exits non-zero, so when gpusliced refuses a job's quota (the GPU
// has less free than asked, a live session of another owner holds the job
// id, bad input) the Prolog exits 0 and leaves one line for the job in the
// refusal directory: <dir>/<jobid>. The SPANK plugin's task_init finds it,
// prints it to the user (srun/salloc's terminal, the batch output file) and
// fails the task, which fails the job and leaves the node up. The Epilog
// removes the file. Only an unreachable or failing gpusliced (an unhealthy
// node) still makes the Prolog fail.

// RefusalDirName is the refusal directory's name under gpusliced's runtime
// directory, where the SPANK plugin looks by default (next to ipc.sock).
const RefusalDirName = "refused"

// Infrastructure reports whether err is the node's failure (gpusliced down
// or broken) rather than a decision about this job's quota.
func Infrastructure(err error) bool {
	return errors.Is(err, client.ErrUnavailable) || errors.Is(err, api.ErrInternal) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// WriteRefusal records why job id was refused, as one line, readable by
// the job's user (the plugin reads it in the task, as that user). The
// directory is created root-owned and not writable by others.
func WriteRefusal(dir, id, msg string) error {
	if !api.ValidSessionID(id) {
		return fmt.Errorf("refusal for job %q: not a valid job id", id)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("refusal directory: %w", err)
	}
	line := strings.ReplaceAll(strings.TrimSpace(msg), "\n", " ") + "\n"
	tmp, err := os.CreateTemp(dir, "."+id+".*")
	if err != nil {
		return fmt.Errorf("refusal for job %s: %w", id, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(line); err != nil {
		tmp.Close()
		return fmt.Errorf("refusal for job %s: %w", id, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("refusal for job %s: %w", id, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("refusal for job %s: %w", id, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, id)); err != nil {
		return fmt.Errorf("refusal for job %s: %w", id, err)
	}
	return nil
}

// Refused reports whether job id has a refusal line: gpusliced refused
// its quota on this node.
func Refused(dir, id string) bool {
	if !api.ValidSessionID(id) {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, id))
	return err == nil
}

// RemoveRefusal deletes job id's refusal line, if any.
func RemoveRefusal(dir, id string) error {
	if !api.ValidSessionID(id) {
		return nil
	}
	err := os.Remove(filepath.Join(dir, id))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove refusal of job %s: %w", id, err)
	}
	return nil
}

// RefusalMessage is the line the user reads.
func RefusalMessage(job Job, node string, err error) string {
	where := ""
	if node != "" {
		where = " on node " + node
	}
	reason := err.Error()
	for _, prefix := range []string{"quota exceeded: "} {
		if i := strings.Index(reason, prefix); i >= 0 {
			reason = reason[i+len(prefix):]
		}
	}
	return fmt.Sprintf("gpuslice: job %s cannot start%s: GPU memory quota refused: %s (the job fails; the node stays in service)",
		job.ID, where, reason)
}
