package store

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

func acctRecord(job string) AcctRecord {
	return AcctRecord{JobID: job, Node: "tn1", NodeList: "tn[1-2]", QuotaBytes: 1 << 30, Ended: time.Now().UTC(),
		GPUs: []api.ReportGPU{{UUID: "GPU-a", LimitBytes: 1 << 30, PeakBytes: 900 << 20, Denied: 1}}}
}

// The queue keeps its records, in order, across a close and reopen (a
// gpusliced restart or a node's reboot), until each is deleted.
func TestAcctQueuePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, j := range []string{"10", "11", "12"} {
		r, err := s.AddAcct(acctRecord(j))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, r.Seq)
	}
	if err := s.DeleteAcct(seqs[1]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.AcctRecords()
	if err != nil || len(recs) != 2 || recs[0].JobID != "10" || recs[1].JobID != "12" || recs[1].Seq != seqs[2] ||
		recs[0].GPUs[0].PeakBytes != 900<<20 || recs[0].NodeList != "tn[1-2]" {
		t.Fatalf("after reopen: %+v, %v", recs, err)
	}
	if r, err := s.AddAcct(acctRecord("13")); err != nil || r.Seq <= seqs[2] {
		t.Fatalf("a record added after reopen: seq %d (last %d), %v", r.Seq, seqs[2], err)
	}
	// A record that could not be written is refused, nothing queued.
	bad := acctRecord("14")
	bad.GPUs = nil
	if _, err := s.AddAcct(bad); err == nil {
		t.Fatal("a record with neither figures nor a refusal was queued")
	}
}

// A queued record the daemon cannot read stops it at start, naming the
// record, instead of being dropped: the figures stay on disk for the admin.
func TestAcctBadRecordRefused(t *testing.T) {
	for name, put := range map[string]func(b *bolt.Bucket) error{
		"not json": func(b *bolt.Bucket) error { return b.Put(seqKey(7), []byte("{garbage")) },
		"no job id": func(b *bolt.Bucket) error {
			return b.Put(seqKey(7), mustJSON(AcctRecord{Node: "n", Refused: true, Ended: time.Now()}))
		},
		"key not a seq":  func(b *bolt.Bucket) error { return b.Put([]byte("x"), mustJSON(acctRecord("1"))) },
		"without a node": func(b *bolt.Bucket) error { r := acctRecord("1"); r.Node = ""; return b.Put(seqKey(7), mustJSON(r)) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.AddAcct(acctRecord("5")); err != nil {
				t.Fatal(err)
			}
			s.db.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketAcct)) })
			s.Close()
			_, err = Open(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "accounting record") {
				t.Fatalf("Open = %v, want ErrCorrupt naming the accounting record", err)
			}
		})
	}
	t.Run("another schema", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "db")
		s, _ := Open(path)
		s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyAcctSchema, []byte("9")) })
		s.Close()
		if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "accounting queue schema") {
			t.Fatalf("Open = %v", err)
		}
	})
}

// A database of an earlier release (no accounting bucket) opens, and gets
// the bucket.
func TestAcctEarlierDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, _ := Open(path)
	s.PutSession(Record{ID: "1", GPUs: []string{"GPU-a"}, Limits: map[string]uint64{"GPU-a": 1}})
	s.db.Update(func(tx *bolt.Tx) error {
		tx.Bucket(bucketMeta).Delete(keyAcctSchema)
		return tx.DeleteBucket(bucketAcct)
	})
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AddAcct(acctRecord("2")); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.Sessions(); len(recs) != 1 {
		t.Fatalf("sessions: %+v", recs)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
