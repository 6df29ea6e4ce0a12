package acctrecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// arraydb stands in for slurmdbd holding an array's rows, one line each
// in rows ("row|raw|JobID|State|NodeList"), each row's AdminComment in
// comment.ROW. sacct -j X lists the rows X picks as Slurm does (a name A_T the
// rows of that name; a bare id the rows whose raw id is X or whose name
// is X or starts with X_); sacctmgr's `where jobid=X` writes the comment
// of every row sacct -j X lists. sacct prints the fields -o names.
type arraydb struct{ dir string }

func newArraydb(t *testing.T, rows string, comments map[string]string) (*arraydb, Slurm) {
	t.Helper()
	d := &arraydb{dir: t.TempDir()}
	d.setRows(rows)
	for row, c := range comments {
		d.write("comment."+row, c)
	}
	pick := `pick() { awk -F'|' -v x="$1" '$2 == x || $3 == x || (x !~ /_/ && index($3, x "_") == 1)' ` + d.dir + `/rows; }
`
	sacct := `#!/bin/sh
` + pick + `while [ $# -gt 0 ]; do case $1 in -j) j=$2; shift;; -o) o=$2; shift;; esac; shift; done
pick "$j" | while IFS='|' read row raw name state nodes; do
	line=; IFS=,; for f in $o; do
		case $f in JobIDRaw) v=$raw;; JobID) v=$name;; State) v=$state;; NodeList) v=$nodes;;
		AdminComment) v=$(cat ` + d.dir + `/comment.$row 2>/dev/null);; *) v=?;; esac
		line=${line:+$line|}$v
	done; unset IFS; echo "$line"
done
`
	sacctmgr := `#!/bin/sh
` + pick + `j=; for a; do case $a in jobid=*) j=${a#jobid=};; AdminComment=*) v=${a#AdminComment=};; esac; done
echo "$j" >> ` + d.dir + `/writes
pick "$j" | while IFS='|' read row raw name state nodes; do printf '%s' "$v" > ` + d.dir + `/comment.$row; done
echo " Modified jobs..."
`
	d.write("sacct", sacct)
	d.write("sacctmgr", sacctmgr)
	os.Chmod(d.path("sacct"), 0o755)
	os.Chmod(d.path("sacctmgr"), 0o755)
	return d, Slurm{Sacct: d.path("sacct"), Sacctmgr: d.path("sacctmgr"), Timeout: 10 * time.Second}
}

func (d *arraydb) path(name string) string { return filepath.Join(d.dir, name) }

func (d *arraydb) write(name, text string) {
	tmp := d.path(name + ".tmp")
	os.WriteFile(tmp, []byte(text), 0o644)
	os.Rename(tmp, d.path(name))
}

func (d *arraydb) setRows(rows string) { d.write("rows", strings.TrimSpace(rows)+"\n") }

func (d *arraydb) comment(row string) string {
	b, _ := os.ReadFile(d.path("comment." + row))
	return string(b)
}

func (d *arraydb) writes() []string {
	b, _ := os.ReadFile(d.path("writes"))
	return strings.Fields(string(b))
}

// lagging starts a recorder beside an arraydb of rows and comments, gives
// it job's record (peak MiB on tn1) and lets it try for half a second
// while slurmdbd lags.
func lagging(t *testing.T, rows string, comments map[string]string, job string, peak uint64) (*arraydb, *counts) {
	t.Helper()
	db, s := newArraydb(t, rows, comments)
	c := &counts{}
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	t.Cleanup(func() { st.Close() })
	r, err := New(st, fast(s, c))
	if err != nil {
		t.Fatal(err)
	}
	r.Add(record(job, "tn1", "tn1", peak))
	run(t, r)
	time.Sleep(500 * time.Millisecond) // several tries
	return db, c
}

// An array of three tasks (raw ids 156, 157 and the array's own 155)
// ends before slurmdbd has caught up: the array's own row (row 1, raw
// 155) still carries the start of task 155_1, split off with the
// array's db_index, so sacct names it 155_1 beside task 155_1's own row.
// The last task's figures wait until slurmdbd names its row 155_3;
// written by the name 155_1 they went to task 155_1 too, as in CI's
// TestSeff (task 155_1 with task 155_3's peak).
func TestArrayTaskWaitsForItsOwnName(t *testing.T) {
	db, c := lagging(t, "1|155|155_1|COMPLETED|tn1\n2|156|155_1|COMPLETED|tn1\n3|157|155_2|COMPLETED|tn1", nil, "155", 1536)
	if w := db.writes(); len(w) != 0 || c.sent.Load() != 0 {
		t.Fatalf("written as %v (%d sent) while its name picked task 155_1 too", w, c.sent.Load())
	}
	db.setRows("1|155|155_3|COMPLETED|tn1\n2|156|155_1|COMPLETED|tn1\n3|157|155_2|COMPLETED|tn1")
	waitUntil(t, "task 3's figures recorded", func() bool { return c.sent.Load() == 1 })
	want := "gpuslice:v2;quota_mib=1024;nodes=1;reported=0;peak_mib=1536;peak_on=tn1/gpu-tn1;denied=1"
	if got := db.comment("1"); got != want {
		t.Errorf("task 155_3: %q, want %q", got, want)
	}
	if db.comment("2") != "" || db.comment("3") != "" {
		t.Errorf("the other tasks' comments: 155_1 %q, 155_2 %q", db.comment("2"), db.comment("3"))
	}
	if w := db.writes(); strings.Join(w, " ") != "155_3" {
		t.Errorf("sacctmgr ran for %v, want 155_3 once", w)
	}
}

// The last task shown by the array's bare id beside a task split off
// before it: `where jobid=155` would write every task's
// comment, so its figures wait until slurmdbd names it 155_3.
func TestArrayTaskWrittenByItsOwnName(t *testing.T) {
	task1 := "gpuslice:v2;quota_mib=4096;nodes=1;reported=0;peak_mib=512;peak_on=tn1/gpu-tn1;denied=0"
	db, c := lagging(t, "1|156|155_1|COMPLETED|tn1\n3|155|155|COMPLETED|tn1", map[string]string{"1": task1}, "155", 1536)
	if w := db.writes(); len(w) != 0 || c.sent.Load() != 0 {
		t.Fatalf("written as %v (%d sent) while its name picked every task", w, c.sent.Load())
	}
	db.setRows("1|156|155_1|COMPLETED|tn1\n3|155|155_3|COMPLETED|tn1")
	waitUntil(t, "task 3's figures recorded", func() bool { return c.sent.Load() == 1 })
	if db.comment("1") != task1 || !strings.Contains(db.comment("3"), "peak_mib=1536") {
		t.Errorf("155_1: %q, 155_3: %q", db.comment("1"), db.comment("3"))
	}
}

// A task split off the array (raw 156) is named 155_1; one more sacct
// finds that no other job answers to that name before it is written.
func TestArrayTaskNameCheckedAlone(t *testing.T) {
	db, c := lagging(t, "1|156|155_1|COMPLETED|tn1\n2|155|155_1|COMPLETED|tn1", nil, "156", 512)
	if w := db.writes(); len(w) != 0 {
		t.Fatalf("written as %v while 155 answered to 155_1 too", w)
	}
	db.setRows("1|156|155_1|COMPLETED|tn1\n2|155|155_2|COMPLETED|tn1")
	waitUntil(t, "task 1's figures recorded", func() bool { return c.sent.Load() == 1 })
	if db.comment("2") != "" || !strings.Contains(db.comment("1"), "peak_mib=512") {
		t.Errorf("155_2: %q, 155_1: %q", db.comment("2"), db.comment("1"))
	}
}

// The array's last task ends while slurmdbd still shows its row pending
// (the row of the array's submission): its figures wait until the row
// shows it ended, then go to it alone.
func TestArrayTaskWaitsForItsEnd(t *testing.T) {
	db, c := lagging(t, "1|155|155|PENDING|None assigned", nil, "155", 1536)
	if w := db.writes(); len(w) != 0 || c.sent.Load() != 0 {
		t.Fatalf("written as %v (%d sent) while slurmdbd showed the job pending", w, c.sent.Load())
	}
	db.setRows("1|155|155_3|COMPLETED|tn1\n2|156|155_1|COMPLETED|tn1\n3|157|155_2|COMPLETED|tn1")
	waitUntil(t, "task 3's figures recorded", func() bool { return c.sent.Load() == 1 })
	if w := db.writes(); strings.Join(w, " ") != "155_3" || db.comment("2") != "" || db.comment("3") != "" {
		t.Errorf("sacctmgr ran for %v; 155_1 %q, 155_2 %q", w, db.comment("2"), db.comment("3"))
	}
}

// sacct's States a job's run ends in, and those it does not.
func TestEnded(t *testing.T) {
	for state, want := range map[string]bool{"COMPLETED": true, "FAILED": true, "CANCELLED by 0": true, "TIMEOUT": true,
		"NODE_FAIL": true, "OUT_OF_MEMORY": true, "REQUEUED": true, "PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true,
		"PENDING": false, "RUNNING": false, "SUSPENDED": false, "REQUEUE_HOLD": false, "": false} {
		if ended(state) != want {
			t.Errorf("ended(%q) = %v", state, !want)
		}
	}
}
