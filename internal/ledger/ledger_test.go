package ledger

import (
	"errors"
	"os"
	"sync/atomic"
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
	defer l.Close()
	limPath, _ := Paths(dir, "s")
	f, err := os.OpenFile(limPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 64), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
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
	got := d.Reclaim(s0, nil)
	if got[0] != 600 || d.Used(0) != 300 || d.Reclaimed(0) != 600 {
		t.Fatalf("reclaim %v used %d reclaimed %d", got, d.Used(0), d.Reclaimed(0))
	}
	if st := d.Slot(s0); st.State != SlotFree || st.PID != 0 {
		t.Fatalf("reclaimed slot %+v", st)
	}
	if n := len(d.Attached()); n != 1 {
		t.Fatalf("%d attached, want 1", n)
	}
	d.Reclaim(s1, nil)
	d.Rebase()
	if d.Used(0) != 0 || d.Peak(0) != 1000 {
		t.Fatalf("after rebase used %d peak %d", d.Used(0), d.Peak(0))
	}
}

// A slot's figure is the sum of its stripes modulo 2^64: bytes charged by
// one thread and released by another cancel out, a net release counts as
// nothing held, a claimed slot starts from zero in every stripe, and
// Reclaim takes back the sum.
func TestSlotStripesSum(t *testing.T) {
	d, err := Create(t.TempDir(), "s", testGPUs(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	i, _, err := d.Claim(100, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	var MiB, GiB uint64 = 1 << 20, 1 << 30
	if err := d.SetLimits([]uint64{GiB, GiB}); err != nil {
		t.Fatal(err)
	}
	if err := d.Reserve(i, 1, 96*MiB); err != nil { // the shared stripe
		t.Fatal(err)
	}
	// stripe 3 holds 64 MiB and keeps 16 MiB of credit
	atomic.AddUint64(d.held(i, 3, 1), 64*MiB)
	atomic.AddUint64(d.lease(i, 3, 1), 80*MiB)
	atomic.AddUint64(d.gpuCtr(1, CtrGPUOffUsed), 80*MiB)
	atomic.AddUint64(d.held(i, 5, 1), -uint64(32*MiB)) // released by another thread
	atomic.AddUint64(d.lease(i, 5, 1), -uint64(32*MiB))
	atomic.AddUint64(d.gpuCtr(1, CtrGPUOffUsed), -uint64(32*MiB))
	if got := d.Slot(i).Used[1]; got != 128*MiB {
		t.Fatalf("slot holds %d, want %d (96 + 64 - 32 MiB)", got, 128*MiB)
	}
	if d.Credit(1) != 16*MiB || d.Charged(1) != 144*MiB || d.Used(1) != 128*MiB {
		t.Fatalf("credit %d, charged %d, used %d; want 16, 144, 128 MiB", d.Credit(1), d.Charged(1), d.Used(1))
	}
	if got := d.Slot(i).Used[0]; got != 0 {
		t.Fatalf("GPU 0: %d, want 0", got)
	}
	got := d.Reclaim(i, nil)
	if got[1] != 128*MiB || d.Charged(1) != 0 || d.Reclaimed(1) != 128*MiB {
		t.Fatalf("Reclaim = %v, used %d, reclaimed %d", got, d.Used(1), d.Reclaimed(1))
	}
	for k := 0; k < SlotStripes; k++ {
		if v := atomic.LoadUint64(d.held(i, k, 1)) | atomic.LoadUint64(d.lease(i, k, 1)); v != 0 {
			t.Fatalf("stripe %d after Reclaim: %d", k, v)
		}
	}

	// A net release (bytes the daemon had already taken back) is 0, and
	// a slot claimed again starts from zero in every stripe.
	j, _, _ := d.Claim(200, 8, 2)
	atomic.AddUint64(d.held(j, 6, 0), -uint64(MiB))
	if got := d.Slot(j).Used[0]; got != 0 {
		t.Fatalf("net release reads %d, want 0", got)
	}
	atomic.AddUint64(d.held(j, 2, 0), 5*MiB)
	d.Reclaim(j, nil)
	k, _, _ := d.Claim(300, 9, 3)
	if k != j || d.Slot(k).Used[0] != 0 {
		t.Fatalf("re-claimed slot %d holds %d", k, d.Slot(k).Used[0])
	}
}

// The fds a client receives cannot change their file's size (a shrunk
// file faults every mapping of it; a grown one fills memory), and the
// read-only limits fd cannot be reopened for writing.
func TestLedgerFilesSealed(t *testing.T) {
	l, err := Create(t.TempDir(), "sealed", testGPUs(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim, ctr := l.Files()
	size := int64(CountersSize(4))
	if err := unix.Ftruncate(int(ctr.Fd()), 0); err == nil {
		t.Error("ftruncate(counters, 0) succeeded")
	}
	if err := unix.Ftruncate(int(ctr.Fd()), size*2); err == nil {
		t.Error("ftruncate(counters) to grow it succeeded")
	}
	if err := unix.Fallocate(int(ctr.Fd()), 0, 0, 1<<30); err == nil {
		t.Error("fallocate(counters, 1 GiB) succeeded")
	}
	var st unix.Stat_t
	unix.Fstat(int(ctr.Fd()), &st)
	if st.Size != size {
		t.Errorf("counters size %d, want %d", st.Size, size)
	}
	if st.Mode&0o077 != 0 {
		t.Errorf("counters mode %o: others may reopen it", st.Mode&0o777)
	}
	if _, err := Map(lim, ctr); err != nil {
		t.Fatalf("the sealed ledger does not map: %v", err)
	}
}

// The credit map is the clients' (they mark a slot before its threads
// first keep credit); the daemon only clears a slot's bit when it frees
// the slot or hands it out again, and leaves every other bit alone.
func TestCreditMapClearedWithTheSlot(t *testing.T) {
	d, err := Create(t.TempDir(), "s", testGPUs(), 130)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	word := func(i int) *uint64 { return u64(d.ctr, CtrOffCreditMap+8*(i/64)) }
	var slots []int
	for p := uint32(100); p < 230; p++ {
		i, _, err := d.Claim(p, uint64(p), 1)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, i)
	}
	for _, i := range slots { // every client marks its slot
		atomic.OrUint64(word(i), 1<<(i%64))
	}
	d.Reclaim(65, nil)
	if w := atomic.LoadUint64(word(65)); w != ^uint64(1<<1) {
		t.Fatalf("after reclaiming slot 65: word 1 = %#x, want every bit but 65's", w)
	}
	if w := atomic.LoadUint64(word(0)); w != ^uint64(0) {
		t.Fatalf("reclaiming slot 65 changed word 0: %#x", w)
	}
	// A stale mark (say, left by a daemon before a restart) goes when the
	// slot is handed out again.
	atomic.OrUint64(word(65), 1<<1)
	if i, _, err := d.Claim(999, 9, 2); err != nil || i != 65 {
		t.Fatalf("Claim = %d, %v; want the freed slot 65", i, err)
	}
	if atomic.LoadUint64(word(65))&(1<<1) != 0 {
		t.Fatal("the slot handed out again is still marked")
	}
}

// Claim finds a process attaching again through the daemon's own record
// of pids, also when the pid was reused while the older process's slot
// still waits for its reclaim.
func TestClaimAgainWithReusedPID(t *testing.T) {
	d, err := Create(t.TempDir(), "s", testGPUs(), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	old, _, _ := d.Claim(500, 1, 1)
	other, _, _ := d.Claim(600, 9, 1)
	reused, again, err := d.Claim(500, 2, 2) // same pid, another process
	if err != nil || again || reused == old || reused == other {
		t.Fatalf("Claim of a reused pid = %d, %v, %v; want a new slot", reused, again, err)
	}
	for _, c := range []struct {
		start uint64
		want  int
	}{{1, old}, {2, reused}, {9, -1}} {
		i, again, err := d.Claim(500, c.start, 3)
		if c.want < 0 {
			if err != nil || again || i == old || i == reused || i == other {
				t.Fatalf("pid 500 with start time 9 = %d, %v, %v; want a new slot", i, again, err)
			}
			continue
		}
		if err != nil || !again || i != c.want {
			t.Fatalf("pid 500 with start time %d attaching again = %d, %v, %v; want slot %d", c.start, i, again, err, c.want)
		}
	}
	d.Reclaim(old, nil)
	if i, again, _ := d.Claim(600, 9, 4); !again || i != other {
		t.Fatalf("pid 600 attaching again = %d, %v; want slot %d", i, again, other)
	}
	if i, again, _ := d.Claim(500, 2, 4); !again || i != reused {
		t.Fatalf("after the older slot's reclaim, pid 500 attaching again = %d, %v; want slot %d", i, again, reused)
	}
}

// A reader outside the daemon (a client mapping, as the tests and the
// interceptor's queries have) never sees a dead process's credit as used
// while the daemon reclaims its slot: Reclaim zeroes the stripes' leases
// before it subtracts them from used, and a reader that took used before
// and the credit after would count the credit as held.
func TestUsedNotTornByReclaim(t *testing.T) {
	const nslots = 512
	d, err := Create(t.TempDir(), "s", testGPUs(), nslots+1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := Map(d.Files())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const held, credit = 300, 200
	other, _, _ := d.Claim(1, 1, 1)
	if err := c.Reserve(other, 0, held); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 100; round++ {
		// Processes whose threads took credit (used and each lease grew
		// together, nothing held) and then died.
		slots := make([]int, nslots)
		for k := range slots {
			i, _, err := d.Claim(uint32(100+k), uint64(round), 1)
			if err != nil {
				t.Fatal(err)
			}
			atomic.AddUint64(d.gpuCtr(0, CtrGPUOffUsed), credit)
			atomic.AddUint64(d.lease(i, k%SlotOwned, 0), credit)
			slots[k] = i
		}
		stop := make(chan struct{})
		bad := make(chan uint64, 1)
		go func() {
			defer close(bad)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if u := c.Used(0); u != held {
					bad <- u
					return
				}
			}
		}()
		for _, i := range slots {
			d.Reclaim(i, nil)
		}
		close(stop)
		if u, torn := <-bad; torn {
			t.Fatalf("round %d: a client read used %d while slots holding only credit were reclaimed; want %d", round, u, held)
		}
	}
}
