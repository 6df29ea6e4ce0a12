package core

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A thread that allocated and freed keeps the bytes as credit (they stay
// in the ledger's used counter) and then sleeps. That credit must never
// cause a denial: the same process's other threads and another process of
// the job can still allocate up to the quota less what is really allocated,
// and cuMemGetInfo's free is exact (quota − really allocated) meanwhile.
func TestIdleThreadCreditNeverDenies(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = GiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID)

	// Process A: an idle thread keeps 100 MiB of credit.
	a := probe.Start(t, env, probe.Bin(t, "gs_probe"), "dev:0", "idlecredit:100M", "meminfo", "pause",
		"alloc:1G", "meminfo", "free", "pause")
	if s := a.Expect("idlecredit"); s.Get("alloc") != "0" || s.Get("free") != "0" {
		t.Fatalf("idle thread: %s\n%s", s.Line, a.Output())
	}
	if m := a.Expect("meminfo"); m.Uint(t, "free") != quota {
		t.Errorf("process A with credit outstanding: %s, want free=%d (nothing is allocated)", m.Line, uint64(quota))
	}
	a.Expect("paused")
	if l.Charged(0) != 100*MiB || l.Used(0) != 0 || l.Credit(0) != 100*MiB {
		t.Fatalf("ledger charged %d, used %d, credit %d; want the idle thread's 100 MiB kept as credit, nothing used",
			l.Charged(0), l.Used(0), l.Credit(0))
	}

	// Process B: sees the whole quota free and gets it, in one allocation.
	b := probe.Start(t, env, probe.Bin(t, "gs_probe"), "dev:0", "meminfo", "alloc:1G", "meminfo", "free", "meminfo")
	if m := b.Expect("meminfo"); m.Uint(t, "free") != quota {
		t.Errorf("process B: %s, want free=%d", m.Line, uint64(quota))
	}
	if s := b.Expect("alloc"); s.Get("rc") != "0" {
		t.Errorf("process B, 1 GiB under a 1 GiB quota with another process's idle credit: %s, want rc=0", s.Line)
	}
	if m := b.Expect("meminfo"); m.Uint(t, "free") != 0 {
		t.Errorf("process B holding the quota: %s, want free=0", m.Line)
	}
	b.Expect("free")
	if m := b.Expect("meminfo"); m.Uint(t, "free") != quota {
		t.Errorf("process B after its free: %s, want free=%d", m.Line, uint64(quota))
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("process B: %v\n%s", err, b.Output())
	}
	noStderr(t, "process B", b.Stderr())
	probe.Eventually(t, 30*time.Second, "process B reclaimed", func() (bool, string) {
		return l.Used(0) == 0, strconv.FormatUint(l.Used(0), 10)
	})

	// Process A's main thread: the whole quota, with its idle thread's
	// credit (taken back by B or still there) counted nowhere twice.
	a.Send("")
	if s := a.Expect("alloc"); s.Get("rc") != "0" {
		t.Errorf("process A's main thread, 1 GiB next to its idle thread: %s, want rc=0", s.Line)
	}
	if m := a.Expect("meminfo"); m.Uint(t, "free") != 0 {
		t.Errorf("process A holding the quota: %s, want free=0", m.Line)
	}
	a.Expect("free")
	a.Expect("paused")
	if u, c := l.Used(0), l.Charged(0); u != 0 || c > quota {
		t.Errorf("after A's free: used %d, charged %d; want 0 and at most the quota", u, c)
	}
	if l.Denied(0) != 0 {
		t.Errorf("%d denials, want none", l.Denied(0))
	}
	a.Send("")
	if err := a.Wait(); err != nil {
		t.Fatalf("process A: %v\n%s", err, a.Output())
	}
	noStderr(t, "process A", a.Stderr())
	probe.Eventually(t, 30*time.Second, "process A's credit back with its slot", func() (bool, string) {
		return l.Charged(0) == 0, strconv.FormatUint(l.Charged(0), 10)
	})
}

// Pointers a thread allocated sit in its own front of the pointer table
// (docs/charging.md "Tables"). Another thread frees them while that
// thread goes on allocating and freeing: every release is found and given
// back (the fronts are flushed for it), nothing is denied, and the ledger
// and cuMemGetInfo come back to exactly nothing allocated.
func TestPointersFreedByAnotherThread(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = GiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID)
	for round := 0; round < 3; round++ {
		p := probe.Start(t, env, probe.Bin(t, "gs_probe"), "dev:0", "crossfree:24:8M", "meminfo", "pause")
		s := p.Expect("crossfree")
		if s.Get("alloc_failed") != "0" || s.Get("free_failed") != "0" {
			t.Fatalf("round %d: %s, want no failed call\n%s", round, s.Line, p.Output())
		}
		if m := p.Expect("meminfo"); m.Uint(t, "free") != quota {
			t.Errorf("round %d: %s, want free=%d (everything was freed)", round, m.Line, uint64(quota))
		}
		p.Expect("paused")
		if u := l.Used(0); u != 0 {
			t.Errorf("round %d: ledger used %d with the process alive, want 0", round, u)
		}
		p.Send("")
		if err := p.Wait(); err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, p.Output())
		}
		noStderr(t, "gs_probe", p.Stderr())
		probe.Eventually(t, 30*time.Second, "slot released", func() (bool, string) {
			return l.Charged(0) == 0, strconv.FormatUint(l.Charged(0), 10)
		})
		if r := l.Reclaimed(0); r != 0 {
			t.Errorf("round %d: the daemon reclaimed %d bytes at exit, want 0 (the process gave everything back)", round, r)
		}
	}
	if n := l.Denied(0); n != 0 {
		t.Errorf("%d denials, want none", n)
	}
}

// A release keeps its bytes as the thread's credit without a handshake
// (docs/ledger.md "Credit": the owner only lowers held, a taker only reads
// it and lowers lease). Here threads that allocate and free small blocks
// all the time race the takers that a second set of processes, asking for
// more than the quota leaves, runs at each of its denials. Whatever the
// interleaving: the quota is never exceeded, each pause finds used equal to
// what the processes hold and to the slots' sum, and everything comes back
// to 0 with nothing left for the daemon to reclaim.
func TestReleasesRaceCreditTakers(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 256 * MiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	env := sessionEnv(t, d, sess.ID)
	smp := sample(l)
	var once sync.Once
	var max uint64
	stopSampling := func() { once.Do(func() { max, _ = smp.done() }) }
	t.Cleanup(stopSampling) // before the ledger is closed, also after a fatal error

	small := startStorm(t, env, 2, 4, 64<<10, 1*MiB, 4)
	large := startStorm(t, env, 2, 2, 16*MiB, 96*MiB, 2)
	for round := 0; round < 6; round++ {
		time.Sleep(250 * time.Millisecond)
		hs, hl := small.pause(nil), large.pause(nil)
		if u, s, h := l.Used(0), sumSlots(l, 0), sum(hs)+sum(hl); u != h || s != u {
			t.Errorf("pause %d: ledger used %d, slots %d, processes hold %d", round, u, s, h)
		}
		small.resume(nil)
		large.resume(nil)
	}
	smallAllocs, _ := small.stop(nil)
	largeAllocs, largeDenied := large.stop(nil)
	stopSampling()
	t.Logf("small: %d allocations; large: %d allocations, %d denials; max used %d of %d",
		smallAllocs, largeAllocs, largeDenied, max, quota)
	if max > quota || l.Peak(0) > quota {
		t.Errorf("used reached %d (peak %d) > quota %d", max, l.Peak(0), quota)
	}
	if smallAllocs == 0 || largeDenied == 0 {
		t.Errorf("no race: %d small allocations, %d denials of the large ones", smallAllocs, largeDenied)
	}
	probe.Eventually(t, 30*time.Second, "every slot released", func() (bool, string) {
		return l.Charged(0) == 0, strconv.FormatUint(l.Charged(0), 10)
	})
	if r := l.Reclaimed(0); r != 0 {
		t.Errorf("the daemon reclaimed %d bytes at exit, want 0 (the processes gave everything back)", r)
	}
}

// cuMemAlloc_v2's common path remembers the thread's last device and its
// ledger GPU (docs/interceptor-internals.md "Cost"). A thread that moves between two
// GPUs is charged on the one it allocates on, also when the other GPU's
// credit would cover the request.
func TestThreadMovingBetweenGPUsChargedOnEach(t *testing.T) {
	d, gpus := twoGPUNode(t)
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:16M", "free", "dev:1", "alloc:2M", "free", // credit: 16 MiB on GPU 0, 2 MiB on GPU 1
		"dev:0", "alloc:2M", "dev:1", "alloc:4M", "dev:0", "alloc:6M", "dev:1", "alloc:8M", "pause",
		"freeall", "pause")
	for i := 0; i < 6; i++ {
		if a := p.Expect("alloc"); a.Get("rc") != "0" {
			t.Fatalf("allocation %d: %s\n%s", i, a.Line, p.Output())
		}
	}
	p.Expect("paused")
	g0, g1 := gpuIndex(t, l, gpus[0].UUID), gpuIndex(t, l, gpus[1].UUID)
	if u0, u1 := l.Used(g0), l.Used(g1); u0 != 8*MiB || u1 != 12*MiB {
		t.Errorf("used %d on GPU 0 and %d on GPU 1, want %d and %d", u0, u1, 8*MiB, 12*MiB)
	}
	p.Send("")
	p.Expect("paused")
	if u0, u1 := l.Used(g0), l.Used(g1); u0 != 0 || u1 != 0 {
		t.Errorf("after freeing everything: used %d on GPU 0 and %d on GPU 1, want 0", u0, u1)
	}
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, p.Output())
	}
	noStderr(t, "gs_probe", p.Stderr())
}

// A context's cost is charged by the thread that creates the context,
// often a program's main thread, which then allocates nothing itself. That
// charge must not take one of the slot's per-thread stripes: with the main
// thread holding one, one of eight allocating threads had none and took
// the shared, exact path for every allocation.
func TestContextChargeLeavesStripesToAllocatingThreads(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{CtxBytes: "64MiB"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 8 * GiB})
	l := openLedger(t, d, sess.ID)
	cmd := exec.Command(example(t, "alloc_bench"), "--threads", "8", "--ms", "20000", "--size", "1048576")
	cmd.Env = sessionEnv(t, d, sess.ID)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var owners [ledger.SlotOwned]uint32
	probe.Eventually(t, 30*time.Second, "eight stripes owned", func() (bool, string) {
		for _, i := range l.InUse() {
			if st, p := l.SlotState(i); st == ledger.SlotAttached && p == pid {
				owners = l.StripeOwners(i)
			}
		}
		n := 0
		for _, o := range owners {
			if o != 0 {
				n++
			}
		}
		return n == ledger.SlotOwned, fmt.Sprint(owners)
	})
	if c, ok := l.CtxCost(0); !ok || c == 0 || l.Charged(0) < c {
		t.Fatalf("context cost %d (known %v), charged %d: the test needs the main thread's context charged", c, ok, l.Charged(0))
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	workers := map[uint32]bool{}
	for _, e := range tasks {
		if tid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil && uint32(tid) != pid {
			workers[uint32(tid)] = true
		}
	}
	for _, o := range owners {
		if o == pid {
			t.Errorf("stripe owners %v: the main thread, which only created the context, holds one", owners)
		} else if !workers[o] {
			t.Errorf("stripe owners %v: %d is not one of the process's allocating threads %v", owners, o, workers)
		}
	}
	if withoutRefusals(stderr.String()) != "" {
		t.Errorf("alloc_bench wrote to stderr:\n%s", stderr.String())
	}
}
