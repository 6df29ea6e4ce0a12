package ledger

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func testGPUs() []GPU {
	return []GPU{
		{UUID: "GPU-00000000-0000-0000-0000-000000000000", Limit: 1000, Physical: 80 << 30},
		{UUID: "GPU-11111111-1111-1111-1111-111111111111", Limit: 500, Physical: 40 << 30},
	}
}

func TestCreateOpenAndFields(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, "job-1", testGPUs(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	limPath, ctrPath := Paths(dir, "job-1")
	for _, p := range []string{limPath, ctrPath} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	if st, _ := os.Stat(ctrPath); st.Size() != int64(CountersSize(4)) {
		t.Errorf("counters size %d", st.Size())
	}
	if l.Session() != "job-1" || l.NGPUs() != 2 || l.NSlots() != 4 {
		t.Fatalf("session %q ngpus %d nslots %d", l.Session(), l.NGPUs(), l.NSlots())
	}
	for g, want := range testGPUs() {
		if l.UUID(g) != want.UUID || l.Limit(g) != want.Limit || l.Physical(g) != want.Physical {
			t.Errorf("gpu %d: %q %d %d", g, l.UUID(g), l.Limit(g), l.Physical(g))
		}
	}
	gen := l.Generation()
	if err := l.SetLimits([]uint64{2000, 3000}); err != nil {
		t.Fatal(err)
	}
	if l.Generation() != gen+1 || l.Limit(0) != 2000 || l.Limit(1) != 3000 {
		t.Errorf("after SetLimits: gen %d limits %d %d", l.Generation(), l.Limit(0), l.Limit(1))
	}
	if err := l.SetLimits([]uint64{1}); err == nil {
		t.Error("SetLimits with the wrong count succeeded")
	}
	// A second mapping (re-adoption) sees the same state.
	l2, err := Open(dir, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.Limit(1) != 3000 {
		t.Errorf("reopened limit %d", l2.Limit(1))
	}
	if _, err := Open(dir, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v, want ErrNotExist", err)
	}
}

func TestCreateRejects(t *testing.T) {
	tests := []struct {
		name   string
		id     string
		gpus   []GPU
		nslots int
	}{
		{"no gpus", "a", nil, 4},
		{"too many gpus", "a", make([]GPU, MaxGPUs+1), 4},
		{"empty id", "", testGPUs(), 4},
		{"long id", string(make([]byte, SessionLen)), testGPUs(), 4},
		{"no slots", "a", testGPUs(), 0},
		{"long uuid", "a", []GPU{{UUID: string(make([]byte, UUIDLen))}}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := Create(t.TempDir(), tc.id, tc.gpus, tc.nslots); err == nil {
				l.Close()
				t.Fatal("Create succeeded")
			}
		})
	}
}

func TestOpenRejectsCorrupt(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, "s", testGPUs(), 2)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	limPath, _ := Paths(dir, "s")
	if err := os.WriteFile(limPath, make([]byte, LimitsSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "s"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open(corrupt) = %v, want ErrInvalid", err)
	}
}

func TestClaimReserveReclaim(t *testing.T) {
	dir := t.TempDir()
	d, err := Create(dir, "s", testGPUs(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s0, again, err := d.Claim(100, 7, 1)
	if err != nil || again || s0 != 0 {
		t.Fatalf("Claim = %d %v %v", s0, again, err)
	}
	if s, again, _ := d.Claim(100, 7, 2); s != s0 || !again {
		t.Fatalf("re-Claim of same pid = %d %v", s, again)
	}
	s1, _, err := d.Claim(200, 8, 3)
	if err != nil || s1 != 1 {
		t.Fatalf("Claim 2 = %d %v", s1, err)
	}
	if _, _, err := d.Claim(300, 9, 4); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("Claim with no free slot = %v", err)
	}

	// A client maps the same files the daemon hands out.
	limF, ctrF := d.Files()
	c, err := Map(limF, ctrF)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetLimits([]uint64{1, 1}); err == nil {
		t.Fatal("client could set limits")
	}
	// The limits mapping is read-only: mprotect to write must fail.
	if err := unix.Mprotect(c.lim, unix.PROT_READ|unix.PROT_WRITE); err == nil {
		t.Fatal("mprotect(PROT_WRITE) on the read-only limits mapping succeeded")
	}
	if err := c.Reserve(s0, 0, 600); err != nil {
		t.Fatal(err)
	}
	if err := c.Reserve(s1, 0, 400); err != nil {
		t.Fatal(err)
	}
	if err := c.Reserve(s1, 0, 1); !errors.Is(err, ErrQuota) {
		t.Fatalf("Reserve past the limit = %v", err)
	}
	if d.Used(0) != 1000 || d.Peak(0) != 1000 || d.Denied(0) != 1 {
		t.Fatalf("used %d peak %d denied %d", d.Used(0), d.Peak(0), d.Denied(0))
	}
	c.Release(s1, 0, 100)
	if d.Used(0) != 900 || d.Slot(s1).Used[0] != 300 {
		t.Fatalf("after release used %d slot %d", d.Used(0), d.Slot(s1).Used[0])
	}
	got := d.Reclaim(s0)
	if got[0] != 600 || d.Used(0) != 300 || d.Reclaimed(0) != 600 {
		t.Fatalf("reclaim %v used %d reclaimed %d", got, d.Used(0), d.Reclaimed(0))
	}
	if st := d.Slot(s0); st.State != SlotFree || st.PID != 0 {
		t.Fatalf("reclaimed slot %+v", st)
	}
	if n := len(d.Attached()); n != 1 {
		t.Fatalf("%d attached, want 1", n)
	}
	d.Reclaim(s1)
	d.Rebase()
	if d.Used(0) != 0 || d.Peak(0) != 1000 {
		t.Fatalf("after rebase used %d peak %d", d.Used(0), d.Peak(0))
	}
}
