package ledger

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// An idle ledger with the default 4,096 slots holds two pages; a claimed
// slot adds its own pages only; the daemon side keeps no fd per ledger
// when it can reopen its mappings.
func TestIdleLedgerIsTwoPagesAndNoFD(t *testing.T) {
	dir := t.TempDir()
	before := openFDs(t)
	var ls []*Ledger
	for i := 0; i < 50; i++ {
		l, err := Create(dir, fmt.Sprintf("s%d", i), testGPUs(), DefaultSlots)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	if ReopensMappings() {
		if added := openFDs(t) - before; added != 0 {
			t.Errorf("50 ledgers hold %d fds, want 0", added)
		}
	} else if added := openFDs(t) - before; added != 100 {
		t.Errorf("50 ledgers without CAP_SYS_ADMIN hold %d fds, want 100", added)
	}
	lim, ctr := Paths(dir, "s0")
	if got := blocks(t, lim) + blocks(t, ctr); got > 16<<10 {
		t.Fatalf("idle ledger of %d slots holds %d bytes, want at most 16 KiB", DefaultSlots, got)
	}
	l := ls[0]
	i, _, err := l.Claim(4242, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(i, 0, 100); err != nil {
		t.Fatal(err)
	}
	if got := blocks(t, ctr); got > 4096+2*SlotSize+8192 {
		t.Errorf("counters with one slot claimed hold %d bytes", got)
	}
	// The files a client gets map and show the charge.
	lfd, cfd, err := l.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}
	lf, cf := FilesOf(lfd, cfd)
	defer lf.Close()
	defer cf.Close()
	c, err := Map(lf, cf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Used(0) != 100 || c.Limit(0) != 1000 {
		t.Errorf("client mapping: used %d limit %d", c.Used(0), c.Limit(0))
	}
	if _, err := unix.FcntlInt(lf.Fd(), unix.F_GETFL, 0); err != nil {
		t.Fatal(err)
	}
	if fl, _ := unix.FcntlInt(lf.Fd(), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDONLY {
		t.Errorf("limits handed out with flags %#x, want O_RDONLY", fl)
	}
}

// After a restart the slots in use are found among the file's data
// extents: a slot claimed far into the file is found, the holes are not
// read (the file does not grow in memory).
func TestAdoptFindsSlotsInDataExtents(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, "s", testGPUs(), DefaultSlots)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var claimed []int
	for k := 0; k < 3000; k++ {
		i, _, err := l.Claim(uint32(1000+k), 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, i)
	}
	for _, i := range claimed[:2990] {
		l.Reclaim(i, nil)
	}
	_, ctr := Paths(dir, "s")
	size := blocks(t, ctr)
	o, err := Open(dir, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f, err := os.OpenFile(ctr, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := fromFiles("s", mustOpen(t, dir), f, false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.NInUse(); got != 10 {
		t.Errorf("adopted ledger finds %d slots in use, want 10", got)
	}
	if got := blocks(t, ctr); got != size {
		t.Errorf("adopting grew the counters from %d to %d bytes", size, got)
	}
}

func mustOpen(t *testing.T, dir string) *os.File {
	t.Helper()
	lim, _ := Paths(dir, "s")
	f, err := os.OpenFile(lim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// An fd-less ledger opens its files once while processes are attached
// (later attaches get duplicates) and closes them when it goes idle: only
// sessions in use hold fds.
func TestInUseLedgerHoldsFilesUntilIdle(t *testing.T) {
	if !ReopensMappings() {
		t.Skip("this process cannot reopen its mappings (no CAP_SYS_ADMIN): ledgers keep their fds")
	}
	l, err := Create(t.TempDir(), "s", testGPUs(), DefaultSlots)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := openFDs(t)
	i, _, err := l.Claim(4242, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 3; n++ { // three attaches
		lf, cf, err := l.OpenFiles()
		if err != nil {
			t.Fatal(err)
		}
		if fl, _ := unix.FcntlInt(uintptr(lf), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("limits handed out with flags %#x, want O_RDONLY", fl)
		}
		unix.Close(lf)
		unix.Close(cf)
	}
	if added := openFDs(t) - before; added != 2 {
		t.Errorf("a ledger in use holds %d fds, want its 2 files", added)
	}
	l.Reclaim(i, nil)
	l.Rebase()
	if added := openFDs(t) - before; added != 0 || !l.Frozen() {
		t.Errorf("idle again: %d fds held (frozen %v), want 0", added, l.Frozen())
	}
}
