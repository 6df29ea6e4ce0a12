// Package store persists sessions, the reports of released sessions and
// the queue of records for Slurm's accounting (accounting.go) in a bbolt
// database (state_dir/gpusliced.db). One writer: the daemon.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is stored under meta/schema; a database with another
// version is refused rather than misread.
const SchemaVersion = "1"

var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketHistory  = []byte("history")
	keySchema      = []byte("schema")
)

// Record is a persisted session. Limits are per GPU UUID.
type Record struct {
	ID      string            `json:"id"`
	UID     uint32            `json:"uid"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	TTL     time.Duration     `json:"ttl"`
	Expires time.Time         `json:"expires"`
	GPUs    []string          `json:"gpus"` // UUIDs, inventory order
	Limits  map[string]uint64 `json:"limits"`
	Peak    map[string]uint64 `json:"peak,omitempty"`    // last known peak (kept across lost ledgers)
	Compute *api.Compute      `json:"compute,omitempty"` // GPU time share; nil: none
	// SLUID is the job's SLUID as Slurm prints it (api.CanonicalSLUID);
	// absent in records written before it was kept.
	SLUID string `json:"sluid,omitempty"`
	// CreatorPID and CreatorStart name the process the session lives with
	// (api.SessionRequest.CreatorPID; its start time tells it from a later
	// process with its pid); 0: none.
	CreatorPID   uint32 `json:"creator_pid,omitempty"`
	CreatorStart uint64 `json:"creator_start,omitempty"`
}

// Store is the open database.
type Store struct {
	db *bolt.DB
}

// ErrCorrupt marks a database that exists but cannot be trusted: the
// daemon refuses to start rather than take it for an empty one (which
// would forget every running job's session).
var ErrCorrupt = errors.New("session database is damaged")

// Open opens (creating if needed) the database at path. An existing file
// must be a whole, consistent database of this schema: a zero-byte,
// truncated or garbled file is an error wrapping ErrCorrupt, and the file
// is left as it is for the admin to inspect or move away.
func Open(path string) (st *Store, err error) {
	existed := false
	if fi, err := os.Stat(path); err == nil {
		existed = true
		if fi.Size() == 0 {
			return nil, fmt.Errorf("open %s: %w: the file is empty (move it away to start without sessions)", path, ErrCorrupt)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A truncated file makes bbolt read past its mapping: turn the fault
	// into an error instead of a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("open %s: %w: %v (move it away to start without sessions)", path, ErrCorrupt, r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: locked by another process (is another gpusliced running?)", path)
		}
		if existed {
			return nil, fmt.Errorf("open %s: %w: %w (move it away to start without sessions)", path, ErrCorrupt, err)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if existed {
		if err := check(db); err != nil {
			db.Close()
			return nil, fmt.Errorf("open %s: %w: %w (move it away to start without sessions)", path, ErrCorrupt, err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keySchema); v != nil && string(v) != SchemaVersion {
			return fmt.Errorf("schema version %q, this gpusliced reads %q", v, SchemaVersion)
		}
		if err := meta.Put(keySchema, []byte(SchemaVersion)); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketSessions); err != nil {
			return err
		}
		if _, err = tx.CreateBucketIfNotExists(bucketHistory); err != nil {
			return err
		}
		return openAcct(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// check verifies an existing database: bbolt's page consistency check, the
// schema mark, and that every session and accounting record decodes.
func check(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil || meta.Get(keySchema) == nil {
			return errors.New("no schema mark: not a gpusliced database")
		}
		if tx.Bucket(bucketSessions) == nil || tx.Bucket(bucketHistory) == nil {
			return errors.New("a bucket is missing")
		}
		err := tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("session %q: %w", k, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return checkAcct(tx)
	})
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// PutSession writes (creates or replaces) a session record.
func (s *Store) PutSession(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode session %s: %w", r.ID, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Put([]byte(r.ID), b)
	})
}

// PutSessions writes several records in one transaction.
func (s *Store) PutSessions(rs []Record) error {
	if len(rs) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		for _, r := range rs {
			v, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode session %s: %w", r.ID, err)
			}
			if err := b.Put([]byte(r.ID), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Sessions returns every persisted session.
func (s *Store) Sessions() ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			var r Record
			// json.Unmarshal copies out of the transaction's memory.
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode session %q: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// Release deletes session id and stores its report, in one transaction.
func (s *Store) Release(id string, rep api.Report) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode report %s: %w", id, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSessions).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketHistory).Put([]byte(id), b)
	})
}

// DeleteSession removes a session record without a report.
func (s *Store) DeleteSession(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Delete([]byte(id))
	})
}

// History returns the report of released session id.
func (s *Store) History(id string) (api.Report, error) {
	var rep api.Report
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketHistory).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &rep)
	})
	if err != nil {
		return rep, fmt.Errorf("read history %s: %w", id, err)
	}
	if !found {
		return rep, fmt.Errorf("%w: no released session %q in history", api.ErrNotFound, id)
	}
	return rep, nil
}

// PruneHistory removes reports released before cutoff and returns how many.
func (s *Store) PruneHistory(cutoff time.Time) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketHistory)
		var old [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var rep api.Report
			if json.Unmarshal(v, &rep) == nil && rep.Released.Before(cutoff) {
				old = append(old, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
