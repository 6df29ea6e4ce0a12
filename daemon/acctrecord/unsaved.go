package acctrecord

// Records the database could not take. A node's record of an ended job
// is queued whatever the state directory's filesystem says: when the
// database cannot be written (the filesystem full), the record is kept in
// memory (its Seq 0) and sent all the same, and the sender writes it to
// the queue on disk once there is room, so that a restart before
// slurmdbd answers still sends it. Not handled: a gpusliced killed while
// a record is in memory only loses it (as a release that waits:
// daemon/session/unwritten.go).

import (
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
)

// unsavedRetry is how often the sender tries again to write the records
// kept in memory only.
const unsavedRetry = time.Second

// keepUnsavedLocked says (once a minute at most) that a record is kept in
// memory only; r.mu held.
func (r *Recorder) keepUnsavedLocked(rec store.AcctRecord, err error) {
	if time.Since(r.unsavedSaid) >= time.Minute {
		r.log.Warn("accounting: the record of an ended job is kept in memory and sent; written to the queue on disk when the state directory has room",
			"job", rec.JobID, "err", err)
		r.unsavedSaid = time.Now()
	}
}

// saveUnsaved writes the records kept in memory only to the queue on
// disk, the oldest first, until one fails; it reports whether any is
// left.
func (r *Recorder) saveUnsaved() (left bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	written := 0
	for _, it := range r.items {
		if it.rec.Seq != 0 || it.finished {
			continue
		}
		saved, err := r.st.AddAcct(it.rec)
		if err != nil {
			left = true
			break
		}
		it.rec.Seq = saved.Seq
		written++
	}
	if written > 0 {
		r.log.Info("accounting: records kept in memory written to the queue on disk", "records", written, "left", left)
	}
	return left
}
