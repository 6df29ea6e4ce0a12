package ipcserver

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"
)

// The VIEW request: a user reads their own jobs (root reads every job).
// Whatever the caller may not read is answered with the same one line,
// whether the job belongs to someone else or does not exist.

var errNotYours = errors.New(ipc.NotYoursMessage)

// errNoCurrentJob: VIEW status without a session, and the daemon cannot
// tell which job the caller is in.
var errNoCurrentJob = errors.New("cannot tell which job you are in: name it (gpuslice status JOBID)")

// errStillRunning: a report asked for a live job of the caller's.
var errStillRunning = errors.New("no report yet")

// mayRead is the one ownership rule of VIEW.
func mayRead(cred *unix.Ucred, owner uint32) bool { return cred.Uid == 0 || cred.Uid == owner }

// callerJob decides which job the caller is in. The session the client
// names wins; it can only select among the caller's own sessions, since
// ownership is checked on the result. Without one, the Slurm job the kernel
// places the caller in (the daemon's pid → job resolution); outside Slurm, a
// caller with exactly one live session on the node is in that one.
func (s *Server) callerJob(cred *unix.Ucred, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	if job := s.m.JobOf(uint32(cred.Pid)); job != "" {
		return job, nil
	}
	found := ""
	for _, v := range s.m.List() {
		if v.UID != cred.Uid {
			continue
		}
		if found != "" {
			return "", errNoCurrentJob
		}
		found = v.ID
	}
	if found == "" {
		return "", errNoCurrentJob
	}
	return found, nil
}

// refuseRead answers a STATUS the caller may not read like a refused VIEW:
// the same line whether the session is another user's or does not exist.
func (s *Server) refuseRead(cc *conn, err error) error {
	if errors.Is(err, api.ErrNotFound) || errors.Is(err, session.ErrNotPermitted) {
		return cc.writeError(ipc.CodeNotYours, ipc.NotYoursMessage)
	}
	return cc.writeError(ipc.CodeInternal, "internal error")
}

// handleView answers one VIEW request.
func (s *Server) handleView(cc *conn, req ipc.Request) error {
	doc, err := s.view(cc.cred, req.View, string(req.Session))
	switch {
	case errors.Is(err, errNotYours):
		return cc.writeError(ipc.CodeNotYours, ipc.NotYoursMessage)
	case errors.Is(err, errNoCurrentJob), errors.Is(err, errStillRunning):
		return cc.writeError(ipc.CodeUnknown, err.Error())
	case err != nil:
		s.opt.Log.Warn("ipc: view", "op", req.View.Op, "uid", cc.cred.Uid, "err", err)
		return cc.writeError(ipc.CodeInternal, "internal error")
	}
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypeViewOK, doc)
	return cc.write(cc.out)
}

func (s *Server) view(cred *unix.Ucred, v ipc.View, named string) ([]byte, error) {
	switch v.Op {
	case ipc.ViewStatus:
		id, err := s.callerJob(cred, named)
		if err != nil {
			return nil, err
		}
		sess, err := s.m.Get(id)
		if err != nil || !mayRead(cred, sess.UID) {
			return nil, errNotYours
		}
		return statusDoc(sess)
	case ipc.ViewReport:
		if !api.ValidSessionID(named) {
			return nil, errNotYours
		}
		rep, err := s.m.History(named)
		if err != nil || !mayRead(cred, rep.UID) {
			if live, lerr := s.m.Get(named); lerr == nil && mayRead(cred, live.UID) {
				return nil, fmt.Errorf("%w: job %s is still running (gpuslice status %s)", errStillRunning, named, named)
			}
			return nil, errNotYours
		}
		return json.Marshal(rep)
	case ipc.ViewLive:
		var items []api.JobSummary
		for _, sess := range s.m.List() {
			if mayRead(cred, sess.UID) {
				items = append(items, api.JobSummary{ID: sess.ID, UID: sess.UID, Created: sess.Created,
					Expires: sess.Expires, GPUs: sess.GPUs, Processes: len(sess.Processes)})
			}
		}
		return page(items, v.Offset, func(p *api.ViewPage, it []api.JobSummary) {
			p.Live, p.UsageSource = it, api.UsageFromLedger
		})
	case ipc.ViewFinished:
		reps, err := s.m.Reports(func(uid uint32) bool { return mayRead(cred, uid) })
		if err != nil {
			return nil, err
		}
		return page(reps, v.Offset, func(p *api.ViewPage, it []api.Report) { p.Finished = it })
	case ipc.ViewGPUs:
		return json.Marshal(api.ViewPage{GPUs: s.m.Inventory(), UsageSource: api.UsageFromLedger})
	}
	return nil, fmt.Errorf("view op %v", v.Op)
}

// statusDoc renders a live session, leaving out processes past what fits
// one frame.
func statusDoc(sess api.Session) ([]byte, error) {
	st := api.JobStatus{Session: sess, UsageSource: api.UsageFromLedger}
	for {
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		if len(b) <= ipc.MaxPayload || len(st.Processes) == 0 {
			return b, nil
		}
		drop := max(1, len(st.Processes)/4)
		st.Processes = st.Processes[:len(st.Processes)-drop]
		st.ProcessesOmitted += drop
	}
}

// page renders items from offset on, as many as fit one frame.
func page[T any](items []T, offset uint32, set func(*api.ViewPage, []T)) ([]byte, error) {
	if int64(offset) >= int64(len(items)) {
		var p api.ViewPage
		set(&p, []T{})
		return json.Marshal(p)
	}
	rest := items[offset:]
	// Grow the page while it fits (each try marshals at most one frame's
	// worth of items).
	best := []byte(nil)
	for n := 1; n <= len(rest); n++ {
		var p api.ViewPage
		set(&p, rest[:n])
		if n < len(rest) {
			p.Next = offset + uint32(n)
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		if len(b) > ipc.MaxPayload {
			break
		}
		best = b
	}
	if best == nil {
		return nil, fmt.Errorf("item %d does not fit one frame", offset)
	}
	return best, nil
}
