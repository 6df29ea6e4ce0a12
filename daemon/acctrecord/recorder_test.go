package acctrecord

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
)

// slurmdbd stands in for Slurm's accounting behind two small programs
// with sacct's and sacctmgr's command lines: one job's AdminComment in a
// file, slurmdbd "down" while a file exists, every sacctmgr run noted.
// (tests/slurm runs the recorder against Slurm's own programs and a real
// slurmdbd.)
type slurmdbd struct {
	dir string
}

func newSlurmdbd(t *testing.T, job, comment string) (*slurmdbd, Slurm) {
	t.Helper()
	d := &slurmdbd{dir: t.TempDir()}
	if err := os.WriteFile(d.path("comment"), []byte(comment), 0o644); err != nil {
		t.Fatal(err)
	}
	sacct := `#!/bin/sh
d=` + d.dir + `
[ -e $d/down ] && { echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1; }
echo >> $d/reads
case " $* " in *" -j ` + job + ` "*) ;; *) exit 0;; esac
[ -e $d/known ] || exit 0
echo "` + job + `|` + job + `|COMPLETED|$(cat $d/nodes 2>/dev/null)|$(cat $d/comment)"
`
	sacctmgr := `#!/bin/sh
d=` + d.dir + `
[ -e $d/down ] && { echo "sacctmgr: error: Problem talking to the database: Connection refused" >&2; exit 1; }
[ -e $d/known ] || { echo " Nothing modified"; exit 0; }
for a; do v=$a; done
echo "$2 $3 $4 $5" >> $d/writes
printf '%s' "${v#AdminComment=}" > $d/comment.$$ && mv $d/comment.$$ $d/comment
echo " Modified jobs..."
`
	for name, s := range map[string]string{"sacct": sacct, "sacctmgr": sacctmgr} {
		if err := os.WriteFile(d.path(name), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.set("known", true)
	return d, Slurm{Sacct: d.path("sacct"), Sacctmgr: d.path("sacctmgr"), Timeout: 10 * time.Second}
}

func (d *slurmdbd) path(name string) string { return filepath.Join(d.dir, name) }

func (d *slurmdbd) set(flag string, on bool) {
	if on {
		os.WriteFile(d.path(flag), nil, 0o644)
	} else {
		os.Remove(d.path(flag))
	}
}

func (d *slurmdbd) comment() string {
	b, _ := os.ReadFile(d.path("comment"))
	return string(b)
}

func (d *slurmdbd) writes() int {
	b, _ := os.ReadFile(d.path("writes"))
	return strings.Count(string(b), "\n")
}

// reads counts sacct's answers so far.
func (d *slurmdbd) reads() int {
	b, _ := os.ReadFile(d.path("reads"))
	return strings.Count(string(b), "\n")
}

// counts are the recorder's events.
type counts struct {
	sent, failed, writes atomic.Int64
	mu                   sync.Mutex
	dropped              map[string]int
}

func (c *counts) events() Events {
	return Events{Sent: func() { c.sent.Add(1) }, Failed: func() { c.failed.Add(1) }, Write: func() { c.writes.Add(1) },
		Dropped: func(r string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.dropped == nil {
				c.dropped = map[string]int{}
			}
			c.dropped[r]++
		}}
}

func (c *counts) drops(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped[reason]
}

// oneRecorder is a recorder (fast options, then set's changes when not
// nil) on a new store, beside a slurmdbd whose job 42 has comment; not
// yet running.
func oneRecorder(t *testing.T, comment string, set func(*Options)) (*slurmdbd, *counts, *store.Store, *Recorder) {
	t.Helper()
	db, s := newSlurmdbd(t, "42", comment)
	c := &counts{}
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	t.Cleanup(func() { st.Close() })
	o := fast(s, c)
	if set != nil {
		set(&o)
	}
	r, err := New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	return db, c, st, r
}

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func record(job, node, nodelist string, peak uint64) store.AcctRecord {
	return store.AcctRecord{JobID: job, Node: node, NodeList: nodelist, QuotaBytes: 1 << 30, Ended: time.Now(),
		GPUs: []api.ReportGPU{{UUID: "GPU-" + node, LimitBytes: 1 << 30, PeakBytes: peak << 20, Denied: 1}}}
}

func fast(s Slurm, c *counts) Options {
	return Options{Slurm: s, Spread: 5 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond,
		Settle: 200 * time.Millisecond, Events: c.events(), Seed: 1}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func run(t *testing.T, r *Recorder) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// A job's nodes record their figures at once: each node writes once, the
// summary holds every node once.
func TestOneWritePerNode(t *testing.T) {
	db, s := newSlurmdbd(t, "42", "")
	var c counts
	for i, n := range []string{"tn1", "tn2", "tn3"} {
		st := openStore(t, filepath.Join(t.TempDir(), "db"))
		t.Cleanup(func() { st.Close() })
		o := fast(s, &c)
		o.Spread = 300 * time.Millisecond // each node's turn: no two writes at once
		r, err := New(st, o)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := r.Add(record("42", n, "tn[1-3]", uint64(100*(i+1)))); err != nil || !out.Queued {
			t.Fatalf("Add: %+v, %v", out, err)
		}
		run(t, r)
	}
	waitUntil(t, "3 records sent", func() bool { return c.sent.Load() == 3 })
	want := "gpuslice:v2;quota_mib=1024;nodes=3;reported=0-2;peak_mib=300;peak_on=tn3/gpu-tn3;denied=3"
	if got := db.comment(); got != want {
		t.Fatalf("comment %q, want %q", got, want)
	}
	if db.writes() != 3 || c.writes.Load() != 3 {
		t.Fatalf("%d sacctmgr runs (%d counted) for 3 nodes", db.writes(), c.writes.Load())
	}
}

// Another node that read the comment before this node's write writes
// after this node's read-back, replacing its figures: the read that
// confirms the write, Settle later, finds them gone and writes again.
func TestLostAfterReadBack(t *testing.T) {
	db, c := lostAfterReadBack(t, time.Second, 0)
	waitUntil(t, "sent", func() bool { return c.sent.Load() == 1 })
	if got := db.comment(); got != lostMerged || db.writes() != 2 {
		t.Fatalf("comment %q after %d writes", got, db.writes())
	}
}

// The same, with a confirming read an hour off: the first look a moment
// after the write finds the figures gone and writes them again, so a
// job's comment is whole in seconds, not a Settle later (TestSeff's
// two-node job had 1 of 2 nodes a minute after its end).
func TestLostFoundAtQuickCheck(t *testing.T) {
	db, c := lostAfterReadBack(t, time.Hour, 300*time.Millisecond)
	waitUntil(t, "tn1's figures written again", func() bool { return db.comment() == lostMerged })
	if db.writes() != 2 || c.sent.Load() != 0 {
		t.Fatalf("%d writes, %d confirmed (the confirming read is an hour off)", db.writes(), c.sent.Load())
	}
}

// A job of one node (its node count, or its node list, says so) has no
// other writer: the read-back after its write confirms the record, which
// leaves the queue then, not a Settle later. A record whose node count
// is unknown and which has no list (a job that may have other nodes)
// still waits for the confirming read.
func TestOneNodeJobConfirmedAtReadBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		list     string
		count    int
		confirms bool
	}{
		{"node count 1", "", 1, true},
		{"node list of one", "tn1", 0, true},
		{"list and count", "tn1", 1, true},
		{"node count unknown, no list", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, c, st, r := oneRecorder(t, "", func(o *Options) { o.Settle, o.QuickCheck = time.Hour, time.Hour })
			rec := record("42", "tn1", tc.list, 100)
			rec.NodeCount = tc.count
			r.Add(rec)
			run(t, r)
			waitUntil(t, "the write and its read-back", func() bool { return db.writes() == 1 && db.reads() >= 2 })
			if !tc.confirms {
				time.Sleep(200 * time.Millisecond)
				if c.sent.Load() != 0 {
					t.Fatal("confirmed by its read-back, though other nodes may write the comment")
				}
				return
			}
			waitUntil(t, "confirmed", func() bool { return c.sent.Load() == 1 })
			if recs, _ := st.AcctRecords(); len(recs) != 0 {
				t.Fatalf("still queued: %+v", recs)
			}
			want := "gpuslice:v2;quota_mib=1024;nodes=1;reported=0;peak_mib=100;peak_on=tn1/gpu-tn1;denied=1"
			if got := db.comment(); got != want || db.writes() != 1 {
				t.Fatalf("comment %q after %d writes, want %q once", got, db.writes(), want)
			}
		})
	}
}

// lostMerged is the comment once tn1's figures are merged into tn2's.
const lostMerged = "gpuslice:v2;quota_mib=1024;nodes=2;reported=0-1;peak_mib=100;peak_on=tn1/gpu-tn1;denied=2"

// lostAfterReadBack runs tn1's recorder (settle, quick: its Settle and
// QuickCheck, 0 the default) until its write and read-back, then
// replaces the comment by tn2's, merged into what tn2 read before
// tn1's write.
func lostAfterReadBack(t *testing.T, settle, quick time.Duration) (*slurmdbd, *counts) {
	t.Helper()
	db, c, _, r := oneRecorder(t, "", func(o *Options) { o.Settle, o.QuickCheck = settle, quick })
	r.Add(record("42", "tn1", "tn[1-2]", 100))
	run(t, r)
	waitUntil(t, "tn1's write and read-back", func() bool { return db.writes() == 1 && db.reads() >= 2 })
	time.Sleep(100 * time.Millisecond) // the read-back's answer read
	other := "gpuslice:v2;quota_mib=1024;nodes=2;reported=1;peak_mib=50;peak_on=tn2/gpu-tn2;denied=1"
	os.WriteFile(db.path("comment"), []byte(other), 0o644)
	return db, c
}

// gpusliced killed between its write and the dequeue sends the record
// again after its restart: the comment holds it, nothing is written.
func TestAlreadyRecordedNotWritten(t *testing.T) {
	db, c, st, r := oneRecorder(t, "gpuslice:v2;quota_mib=1024;nodes=2;reported=0;peak_mib=100;peak_on=tn1/gpu-tn1;denied=1", nil)
	r.Add(record("42", "tn1", "tn[1-2]", 100))
	run(t, r)
	waitUntil(t, "sent", func() bool { return c.sent.Load() == 1 })
	if db.writes() != 0 {
		t.Fatalf("%d writes of a record already in the comment", db.writes())
	}
	if recs, _ := st.AcctRecords(); len(recs) != 0 {
		t.Fatalf("still queued: %+v", recs)
	}
}

// slurmdbd down: records wait on disk across a restart of gpusliced,
// with backoff; once it is back they all go, and the queue empties.
func TestOutageAndRestart(t *testing.T) {
	db, s := newSlurmdbd(t, "42", "")
	db.set("down", true)
	path := filepath.Join(t.TempDir(), "db")
	st := openStore(t, path)
	var c counts
	r, _ := New(st, fast(s, &c))
	stop := run(t, r)
	for i, n := range []string{"tn1", "tn2"} {
		r.Add(record("42", n, "tn[1-2]", uint64(10*(i+1))))
	}
	waitUntil(t, "a few failed sends", func() bool { return c.failed.Load() >= 3 })
	stop()
	if q := r.Stats(); q.Queued != 2 || q.Oldest.IsZero() {
		t.Fatalf("stats while down: %+v", q)
	}
	st.Close() // gpusliced stops (or the node reboots)

	st = openStore(t, path)
	defer st.Close()
	r, err := New(st, fast(s, &c))
	if err != nil || r.Stats().Queued != 2 {
		t.Fatalf("reopened: %+v, %v", r.Stats(), err)
	}
	run(t, r)
	time.Sleep(50 * time.Millisecond)
	db.set("down", false)
	waitUntil(t, "both sent", func() bool { return c.sent.Load() == 2 })
	if got := db.comment(); got != "gpuslice:v2;quota_mib=1024;nodes=2;reported=0-1;peak_mib=20;peak_on=tn2/gpu-tn2;denied=2" {
		t.Fatalf("comment %q", got)
	}
	if st := r.Stats(); st.Queued != 0 || st.LastSuccess.IsZero() {
		t.Fatalf("stats after: %+v", st)
	}
}

// Slurm 22.05 gives the Epilog the job's node count, not its node list:
// each node is placed by the list slurmdbd holds (what seff expands), and
// waits while slurmdbd has none of that many nodes yet (it counted both
// nodes of a job as node 0, one of them twice once slurmdbd had the list).
func TestPlacedBySlurmdbdNodeList(t *testing.T) {
	db, s := newSlurmdbd(t, "42", "")
	os.WriteFile(db.path("nodes"), []byte("None assigned"), 0o644)
	var c counts
	for i, n := range []string{"tn3", "tn1"} {
		st := openStore(t, filepath.Join(t.TempDir(), "db"))
		t.Cleanup(func() { st.Close() })
		o := fast(s, &c)
		r, _ := New(st, o)
		rec := record("42", n, "", uint64(10*(i+1)))
		rec.NodeCount = 3
		r.Add(rec)
		run(t, r)
		if i == 0 {
			time.Sleep(100 * time.Millisecond)
			if db.writes() != 0 {
				t.Fatalf("written before slurmdbd held the job's nodes: %q", db.comment())
			}
			os.WriteFile(db.path("nodes"), []byte("tn[1-3]"), 0o644)
		}
		waitUntil(t, n+" sent", func() bool { return c.sent.Load() == int64(i+1) })
	}
	if got := db.comment(); got != "gpuslice:v2;quota_mib=1024;nodes=3;reported=0,2;peak_mib=20;peak_on=tn1/gpu-tn1;denied=2" {
		t.Fatalf("comment %q", got)
	}
}

// A job slurmdbd does not know yet is tried again until it does.
func TestJobNotYetKnown(t *testing.T) {
	db, c, _, r := oneRecorder(t, "", nil)
	db.set("known", false)
	r.Add(record("42", "tn1", "tn1", 10))
	run(t, r)
	time.Sleep(100 * time.Millisecond)
	if c.sent.Load() != 0 {
		t.Fatal("sent before slurmdbd knew the job")
	}
	db.set("known", true)
	waitUntil(t, "sent", func() bool { return c.sent.Load() == 1 })
	if !strings.HasPrefix(db.comment(), "gpuslice:v2;") {
		t.Fatalf("comment %q", db.comment())
	}
}

// The queue is bounded: past queue_max a record is not kept, counted.
func TestQueueBounded(t *testing.T) {
	_, s := newSlurmdbd(t, "42", "")
	var c counts
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	defer st.Close()
	o := fast(s, &c)
	o.QueueMax = 2
	r, _ := New(st, o) // not running: nothing leaves the queue
	for i := 0; i < 3; i++ {
		out, err := r.Add(record(fmt.Sprint(40+i), "tn1", "tn1", 10))
		if err != nil || out.Queued != (i < 2) {
			t.Fatalf("record %d: %+v, %v", i, out, err)
		}
		if i == 2 && !strings.Contains(out.Why, "full") {
			t.Fatalf("why: %q", out.Why)
		}
	}
	if recs, _ := st.AcctRecords(); len(recs) != 2 || c.drops(DropQueueFull) != 1 {
		t.Fatalf("%d queued, %d dropped", len(recs), c.drops(DropQueueFull))
	}
}

// A site's own AdminComment is left alone; the record is dropped, said.
func TestSiteComment(t *testing.T) {
	db, c, _, r := oneRecorder(t, "JS1:AbC", nil)
	r.Add(record("42", "tn1", "tn1", 10))
	run(t, r)
	waitUntil(t, "dropped", func() bool { return c.drops(DropComment) == 1 })
	if db.comment() != "JS1:AbC" || db.writes() != 0 {
		t.Fatalf("comment %q, %d writes", db.comment(), db.writes())
	}
}

// Without accounting nothing is queued.
func TestOff(t *testing.T) {
	var c counts
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	defer st.Close()
	o := fast(Slurm{}, &c)
	o.Off = func() string { return "no slurmdbd" }
	r, _ := New(st, o)
	out, err := r.Add(record("42", "tn1", "tn1", 10))
	if err != nil || out.Queued || out.Why != "no slurmdbd" || c.drops(DropNoAccounting) != 1 {
		t.Fatalf("%+v, %v", out, err)
	}
	if recs, _ := st.AcctRecords(); len(recs) != 0 {
		t.Fatalf("queued: %+v", recs)
	}
}

func TestOffFromSlurmConf(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "sacctmgr")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	conf := func(body string) string {
		p := filepath.Join(t.TempDir(), "slurm.conf")
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	for _, tc := range []struct {
		name, mode, sacctmgr, conf string
		off                        bool
	}{
		{"slurmdbd", "auto", exe, conf("ClusterName=x\naccountingstoragetype=accounting_storage/slurmdbd # the dbd\n"), false},
		{"none", "auto", exe, conf("AccountingStorageType=accounting_storage/none\n"), true},
		{"unset", "auto", exe, conf("ClusterName=x\n#AccountingStorageType=accounting_storage/slurmdbd\n"), true},
		{"no sacctmgr", "auto", filepath.Join(dir, "nothere"), conf("AccountingStorageType=accounting_storage/slurmdbd\n"), true},
		{"configless", "auto", exe, filepath.Join(dir, "nothere.conf"), false},
		{"off", "off", exe, conf("AccountingStorageType=accounting_storage/slurmdbd\n"), true},
		{"on", "on", "/nothere", "/nothere", false},
	} {
		why := Off(tc.mode, tc.sacctmgr, tc.conf)
		if (why != "") != tc.off {
			t.Errorf("%s: Off = %q", tc.name, why)
		}
	}
}

// A record whose job slurmdbd has not known for UnknownJobAge is given
// up, said and counted; a younger one waits.
func TestUnknownJobGivenUp(t *testing.T) {
	db, c, _, r := oneRecorder(t, "", nil)
	db.set("known", false)
	old := record("42", "tn1", "tn1", 10)
	old.Ended = time.Now().Add(-UnknownJobAge - time.Hour)
	r.Add(old)
	r.Add(record("42", "tn2", "tn[1-2]", 10))
	run(t, r)
	waitUntil(t, "the old record given up", func() bool { return c.drops(DropUnknownJob) == 1 })
	time.Sleep(50 * time.Millisecond)
	if q := r.Stats().Queued; q != 1 || c.sent.Load() != 0 {
		t.Fatalf("%d queued, %d sent; want the younger record waiting", q, c.sent.Load())
	}
}
