package session

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

// A session's SLUID is kept as Slurm prints it, answers JobOfSLUID while
// the session lives, survives a restart, and an old record without one
// still loads.
func TestSessionSLUID(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	if _, _, err := f.m.Create(api.SessionRequest{ID: "1", QuotaBytes: 1 << 30, SLUID: "x123"}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("malformed SLUID: %v; want bad request", err)
	}
	v, _, err := f.m.Create(api.SessionRequest{ID: "1", QuotaBytes: 1 << 30, SLUID: "seknktv3wpv500"})
	if err != nil || v.SLUID != "sEKNKTV3WPV500" {
		t.Fatalf("create: %+v, %v", v, err)
	}
	if _, created, err := f.m.Create(api.SessionRequest{ID: "1", QuotaBytes: 1 << 30, SLUID: "sEKNKTV3WPV500"}); err != nil || created {
		t.Fatalf("same session again: created %v, %v", created, err)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "1", QuotaBytes: 1 << 30, SLUID: "s0000000000001"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("same id, another SLUID (requeue): %v; want conflict", err)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "2", QuotaBytes: 1 << 30, SLUID: "sEKNKTV3WPV500"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("another id, same SLUID: %v; want conflict", err)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "3", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if j := f.m.JobOfSLUID("sEKNKTV3WPV500"); j != "1" {
		t.Fatalf("JobOfSLUID = %q; want 1", j)
	}
	if j := f.m.JobOfSLUID("s0000000000001"); j != "" {
		t.Fatalf("unknown SLUID answers %q", j)
	}
	f.close()

	// A record written before SLUIDs were kept (no "sluid" key).
	db, err := bolt.Open(filepath.Join(dir, "db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]any{"id": "4", "uid": 0, "gpus": []string{gpus[0].UUID},
		"limits": map[string]uint64{gpus[0].UUID: 1 << 30}, "ttl": int64(time.Hour), "expires": time.Now().Add(time.Hour)})
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("sessions")).Put([]byte("4"), old) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	f2 := newFixture(t, dir)
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if j := f2.m.JobOfSLUID("sEKNKTV3WPV500"); j != "1" {
		t.Fatalf("after restart JobOfSLUID = %q; want 1", j)
	}
	if v, err := f2.m.Get("4"); err != nil || v.SLUID != "" {
		t.Fatalf("old record: %+v, %v", v, err)
	}
	if _, err := f2.m.Delete("1"); err != nil {
		t.Fatal(err)
	}
	if j := f2.m.JobOfSLUID("sEKNKTV3WPV500"); j != "" {
		t.Fatalf("after release JobOfSLUID = %q", j)
	}
}

// recordingLimits is a DriverLimits that remembers what it was asked.
type recordingLimits struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingLimits) Apply(rec store.Record, gidx []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "apply "+rec.ID+" "+fmtLimits(rec.Limits))
}

func (r *recordingLimits) Remove(rec store.Record, gidx []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "remove "+rec.ID)
}

func (r *recordingLimits) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// The driver's limits follow the session: applied at create, quota change
// and restore, removed at every release (delete, TTL).
func TestDriverLimitsFollowSessions(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	rl := &recordingLimits{}
	f.m.opt.DriverLimits = rl
	u := gpus[0].UUID
	if _, _, err := f.m.Create(api.SessionRequest{ID: "10", QuotaBytes: 1 << 30, GPUs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	q := uint64(2 << 30)
	if _, err := f.m.Patch("10", api.PatchRequest{QuotaBytes: &q}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.Create(api.SessionRequest{ID: "11", QuotaBytes: 1 << 30, GPUs: []string{"0"}, TTLSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	want := []string{"apply 10 " + u + "=1GiB", "apply 10 " + u + "=2GiB", "apply 11 " + u + "=1GiB"}
	if got := rl.take(); !slices.Equal(got, want) {
		t.Fatalf("events %q; want %q", got, want)
	}
	f.close()

	f2 := newFixture(t, dir)
	rl2 := &recordingLimits{}
	f2.m.opt.DriverLimits = rl2
	if err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	got := rl2.take()
	if len(got) != 2 || !(slices.Contains(got, "apply 10 "+u+"=2GiB") && slices.Contains(got, "apply 11 "+u+"=1GiB")) {
		t.Fatalf("after restore %q; want both sessions applied again", got)
	}
	f2.advance(2 * time.Second)
	f2.m.Sweep() // 11 is past its TTL
	if _, err := f2.m.Delete("10"); err != nil {
		t.Fatal(err)
	}
	if got := rl2.take(); !slices.Equal(got, []string{"remove 11", "remove 10"}) {
		t.Fatalf("releases %q; want remove 11 (ttl), remove 10 (delete)", got)
	}
}
