package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// View documents, re-exported.
type (
	JobStatus  = api.JobStatus
	JobSummary = api.JobSummary
)

// ErrNotYours: the job is not the caller's, or does not exist; the daemon
// does not say which.
var ErrNotYours = errors.New(ipc.NotYoursMessage)

// Viewer reads the caller's own jobs over the IPC socket (VIEW requests):
// no admin socket, no root. The daemon identifies the caller from the
// socket (SO_PEERCRED).
type Viewer struct {
	Socket  string
	Timeout time.Duration // per call; 0 means 10 s
}

func (v Viewer) call(op ipc.ViewOp, id string, offset uint32, out any) error {
	c, err := ipc.Dial(v.Socket)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer c.Close()
	to := v.Timeout
	if to == 0 {
		to = 10 * time.Second
	}
	c.SetDeadline(time.Now().Add(to))
	raw, err := c.View(op, id, offset)
	if err != nil {
		var re *ipc.RemoteError
		if errors.As(err, &re) {
			switch re.Code {
			case ipc.CodeNotYours:
				return ErrNotYours
			case ipc.CodeUnknown:
				return fmt.Errorf("%w: %s", ErrNotFound, re.Message)
			case ipc.CodeBadRequest:
				return fmt.Errorf("%w: %s (does gpusliced predate VIEW requests?)", ErrBadRequest, re.Message)
			}
		}
		return fmt.Errorf("view %v: %w", op, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode view %v reply: %w", op, err)
	}
	return nil
}

// Status returns a live job of the caller's; id "" asks the daemon which
// job the caller is in.
func (v Viewer) Status(id string) (*JobStatus, error) {
	var s JobStatus
	if err := v.call(ipc.ViewStatus, id, 0, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Report returns the report of a finished job of the caller's.
func (v Viewer) Report(id string) (*Report, error) {
	var r Report
	if err := v.call(ipc.ViewReport, id, 0, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// maxPages bounds a list against a daemon that keeps sending pages.
const maxPages = 100000

func (v Viewer) pages(op ipc.ViewOp, each func(api.ViewPage)) error {
	var off uint32
	for i := 0; i < maxPages; i++ {
		var p api.ViewPage
		if err := v.call(op, "", off, &p); err != nil {
			return err
		}
		each(p)
		if p.Next == 0 {
			return nil
		}
		if p.Next <= off {
			return fmt.Errorf("view %v: page offset went from %d to %d", op, off, p.Next)
		}
		off = p.Next
	}
	return fmt.Errorf("view %v: more than %d pages", op, maxPages)
}

// Live returns the caller's live jobs (root: every live session).
func (v Viewer) Live() ([]JobSummary, error) {
	out := []JobSummary{}
	err := v.pages(ipc.ViewLive, func(p api.ViewPage) { out = append(out, p.Live...) })
	return out, err
}

// Finished returns the reports of the caller's finished jobs that the
// daemon still keeps, most recent first (root: every report).
func (v Viewer) Finished() ([]Report, error) {
	out := []Report{}
	err := v.pages(ipc.ViewFinished, func(p api.ViewPage) { out = append(out, p.Finished...) })
	return out, err
}

// GPUs returns the node's GPUs with node-wide committed and used bytes
// (totals only: nothing per job).
func (v Viewer) GPUs() ([]GPU, error) {
	var p api.ViewPage
	if err := v.call(ipc.ViewGPUs, "", 0, &p); err != nil {
		return nil, err
	}
	return p.GPUs, nil
}
