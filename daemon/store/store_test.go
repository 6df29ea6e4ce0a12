package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// A damaged database is refused, never taken for an empty one (which would
// forget the sessions of running jobs), and the file is left untouched.
func TestOpenRefusesDamagedDatabase(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.db")
	st, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := st.PutSession(Record{ID: fmt.Sprintf("job%d", i), UID: 1000, GPUs: []string{"GPU-a"},
			Limits: map[string]uint64{"GPU-a": 1 << 30}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	garble := func(b []byte) []byte {
		out := append([]byte(nil), b...)
		for i := 4096; i < len(out); i += 7 {
			out[i] ^= 0x5a
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"zero bytes", nil},
		{"truncated to one page", whole[:4096]},
		{"truncated to half", whole[:len(whole)/2]},
		{"garbled pages", garble(whole)},
		{"not a database", []byte("this is not a bbolt file\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "gpusliced.db")
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := Open(p)
			if err == nil {
				recs, _ := st.Sessions()
				st.Close()
				t.Fatalf("damaged database opened (%d sessions seen)", len(recs))
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q: want ErrCorrupt naming %s", err, p)
			}
			after, _ := os.ReadFile(p)
			if !bytes.Equal(after, tc.data) {
				t.Fatal("the damaged file was changed")
			}
		})
	}
	st, err = Open(good)
	if err != nil {
		t.Fatalf("intact database refused: %v", err)
	}
	defer st.Close()
	if recs, err := st.Sessions(); err != nil || len(recs) != 50 {
		t.Fatalf("intact database: %d sessions, %v", len(recs), err)
	}
}
