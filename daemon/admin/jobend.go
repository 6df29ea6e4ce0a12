package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpuslice/gpuslice/daemon/acctrecord"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
)

// Recorder queues a node's record of an ended job for Slurm's accounting
// (daemon/acctrecord).
type Recorder interface {
	Add(store.AcctRecord) (acctrecord.Outcome, error)
}

// jobEnd is the Epilog's one call: release the session (as DELETE does)
// and queue this node's figures, or its refusal, for Slurm's accounting;
// then answer at once. Nothing here waits on Slurm.
func (h *handler) jobEnd(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.JobEndRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if !api.ValidSessionID(id) || req.Node == "" || len(req.Node) > 255 || len(req.NodeList) > 1<<16 ||
		req.NodeCount < 0 || req.NodeCount > 1<<16 {
		writeErr(w, fmt.Errorf("%w: job end: a job id, this node's name and the job's node list are needed", api.ErrBadRequest))
		return
	}
	var out api.JobEnd
	rep, err := h.m.Delete(id)
	switch {
	case err == nil:
		out.Report = &rep
	case errors.Is(err, api.ErrNotFound):
		out.Released = "no session to release"
	default:
		// Live processes (released when they exit) or the daemon's own
		// failure: no final figures to record.
		out.Released = err.Error()
	}
	rec := store.AcctRecord{JobID: id, Node: req.Node, NodeList: req.NodeList, NodeCount: req.NodeCount, QuotaBytes: req.QuotaBytes,
		SLUID: req.SLUID, Ended: time.Now().UTC()}
	switch {
	case out.Report != nil && len(out.Report.GPUs) > 0:
		rec.GPUs = out.Report.GPUs
		for _, g := range rec.GPUs {
			rec.QuotaBytes = max(rec.QuotaBytes, g.LimitBytes)
		}
	case req.Refused:
		rec.Refused = true
	default:
		out.Accounting = "nothing to record (no session released here, no refusal)"
		writeJSON(w, http.StatusOK, out)
		return
	}
	if h.rec == nil {
		out.Accounting = "gpusliced records nothing in Slurm's accounting"
		writeJSON(w, http.StatusOK, out)
		return
	}
	o, err := h.rec.Add(rec)
	switch {
	case err != nil:
		h.log.Error("accounting: cannot queue the record of an ended job", "job", id, "err", err)
		out.Accounting = "cannot queue the record: " + err.Error()
	case o.Queued:
		out.Accounting = api.AccountingQueued
	default:
		out.Accounting = o.Why
	}
	writeJSON(w, http.StatusOK, out)
}
