package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

func TestSessionsAndHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	r := Record{ID: "1", UID: 1000, Created: now, Updated: now, TTL: time.Hour, Expires: now.Add(time.Hour),
		GPUs: []string{"GPU-a"}, Limits: map[string]uint64{"GPU-a": 5}}
	if err := s.PutSession(r); err != nil {
		t.Fatal(err)
	}
	r2 := r
	r2.ID = "2"
	if err := s.PutSessions([]Record{r2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release("1", api.Report{ID: "1", Released: now.Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release("2", api.Report{ID: "2", Released: now}); err != nil {
		t.Fatal(err)
	}
	s.PutSession(Record{ID: "3", GPUs: []string{"GPU-a"}, Limits: map[string]uint64{"GPU-a": 1}})
	s.Close()

	// Reopen: everything persisted.
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Sessions()
	if err != nil || len(recs) != 1 || recs[0].ID != "3" {
		t.Fatalf("sessions after reopen: %+v, %v", recs, err)
	}
	if rep, err := s.History("1"); err != nil || rep.ID != "1" {
		t.Fatalf("history: %+v, %v", rep, err)
	}
	if _, err := s.History("9"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("history of unknown id = %v", err)
	}
	n, err := s.PruneHistory(now.Add(-24 * time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v", n, err)
	}
	if _, err := s.History("1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatal("pruned report still there")
	}
	if _, err := s.History("2"); err != nil {
		t.Fatal("recent report pruned")
	}
}

func TestSchemaVersionAndLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second opener times out on the file lock with a clear message.
	if _, err := Open(path); err == nil {
		t.Fatal("second Open succeeded while the database is open")
	}
	s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("99")) })
	s.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("Open accepted schema version 99")
	}
}
