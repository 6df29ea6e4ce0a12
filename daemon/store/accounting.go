package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

// The accounting queue: one record per node per ended job, kept until
// gpusliced has written it to Slurm's accounting (daemon/acctrecord). Its
// bucket has a schema version of its own (meta/accounting_schema), so a
// database of an earlier release gets the bucket when opened.

// AcctSchemaVersion is stored under meta/accounting_schema.
const AcctSchemaVersion = "1"

var (
	bucketAcct    = []byte("accounting")
	keyAcctSchema = []byte("accounting_schema")
)

// AcctRecord is one node's figures of one ended job: what its gpusliced
// released, or that it refused the job's quota.
type AcctRecord struct {
	// Seq is the record's place in the queue (its key); set by AddAcct.
	Seq   uint64 `json:"-"`
	JobID string `json:"job_id"`
	// Node is this node's name; NodeList the job's nodes as Slurm gives
	// them (SLURM_JOB_NODELIST, a compressed hostlist).
	Node     string `json:"node"`
	NodeList string `json:"node_list,omitempty"`
	// NodeCount is the job's node count (SLURM_JOB_NUM_NODES; 0: unknown).
	NodeCount int `json:"node_count,omitempty"`
	// QuotaBytes is the job's quota per GPU.
	QuotaBytes uint64 `json:"quota_bytes"`
	// Refused: gpusliced refused the quota here (no figures).
	Refused bool   `json:"refused,omitempty"`
	SLUID   string `json:"sluid,omitempty"`
	// GPUs are the released session's figures (gpusliced's, never the
	// job's own counters).
	GPUs  []api.ReportGPU `json:"gpus,omitempty"`
	Ended time.Time       `json:"ended"`
}

// Validate checks what a record must hold to be written.
func (r AcctRecord) Validate() error {
	switch {
	case !api.ValidSessionID(r.JobID):
		return fmt.Errorf("job id %q is not a job id", r.JobID)
	case r.Node == "":
		return errors.New("no node name")
	case !r.Refused && len(r.GPUs) == 0:
		return errors.New("neither figures nor a refusal")
	case r.Ended.IsZero():
		return errors.New("no end time")
	case r.NodeCount < 0:
		return fmt.Errorf("node count %d", r.NodeCount)
	}
	return nil
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// checkAcct verifies the queue of an existing database: its schema mark
// when it has one, and that every record decodes and is whole.
func checkAcct(tx *bolt.Tx) error {
	b := tx.Bucket(bucketAcct)
	if b == nil {
		return nil // a database of an earlier release: the bucket comes at Open
	}
	if v := tx.Bucket(bucketMeta).Get(keyAcctSchema); string(v) != AcctSchemaVersion {
		return fmt.Errorf("accounting queue schema version %q, this gpusliced reads %q", v, AcctSchemaVersion)
	}
	return b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("accounting record key %x: not a sequence number", k)
		}
		var r AcctRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("accounting record %d: %w", binary.BigEndian.Uint64(k), err)
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("accounting record %d (job %q): %w", binary.BigEndian.Uint64(k), r.JobID, err)
		}
		return nil
	})
}

// openAcct creates the queue's bucket and schema mark.
func openAcct(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyAcctSchema); v != nil && string(v) != AcctSchemaVersion {
		return fmt.Errorf("accounting queue schema version %q, this gpusliced reads %q", v, AcctSchemaVersion)
	}
	if err := meta.Put(keyAcctSchema, []byte(AcctSchemaVersion)); err != nil {
		return err
	}
	_, err := tx.CreateBucketIfNotExists(bucketAcct)
	return err
}

// AddAcct appends r to the queue (durably, once it returns) and returns
// it with its Seq.
func (s *Store) AddAcct(r AcctRecord) (AcctRecord, error) {
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("accounting record of job %q: %w", r.JobID, err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAcct)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		r.Seq = seq
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put(seqKey(seq), v)
	})
	if err != nil {
		return r, fmt.Errorf("queue accounting record of job %s: %w", r.JobID, err)
	}
	return r, nil
}

// AcctRecords returns the queue, oldest first.
func (s *Store) AcctRecords() ([]AcctRecord, error) {
	var out []AcctRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAcct).ForEach(func(k, v []byte) error {
			var r AcctRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode accounting record %x: %w", k, err)
			}
			r.Seq = binary.BigEndian.Uint64(k)
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// DeleteAcct removes record seq from the queue.
func (s *Store) DeleteAcct(seq uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAcct).Delete(seqKey(seq))
	})
}
