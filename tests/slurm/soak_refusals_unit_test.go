package slurm

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A refusal as gpusliced logs it (slog's text, as daemon/admin writes
// it) explains a job without a session, and a holder whose job Slurm had
// ended before the refusal is counted apart; a job no node refused is
// unexplained.
func TestNoSessionExplained(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	at := time.Date(2026, 12, 7, 16, 0, 30, 0, time.UTC)
	since := at.Add(-time.Minute).Format(time.RFC3339)
	log.Info("session created", "session", "41")
	log.Info("create refused", "session", "50",
		"err", `quota exceeded: GPU 0 (GPU-0fb7): asked 4GiB, 3.9GiB free (16GiB capacity x overcommit 1, 12.1GiB committed to 2 other sessions)`,
		"gpu0_held_by", "43 8GiB since "+since+"; 41 4GiB since "+since+" (released, waiting for its processes to end)")
	// the refusal's line at the refusal's time
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	lines[1] = "time=" + at.Format(time.RFC3339Nano) + lines[1][strings.Index(lines[1], " level="):]
	p := filepath.Join(t.TempDir(), "gpusliced-tn1.out")
	os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	rs := parseRefusals("tn1", f)
	if len(rs) != 1 || rs[0].job != "50" || !rs[0].at.Equal(at) || len(rs[0].holders) != 2 || rs[0].holders[0].job != "43" ||
		!rs[0].holders[1].ended || !strings.Contains(rs[0].why, "asked 4GiB") {
		t.Fatalf("refusals of %q: %+v", lines[1], rs)
	}
	ends := map[string]time.Time{"43": at.Add(-5 * time.Second), "41": at.Add(time.Minute)}
	note, out := explainNoSession([]string{"50 FAILED on tn1", "51 FAILED on tn2"}, map[string][]refusal{"50": rs}, ends)
	if !strings.Contains(note, "2 jobs started without a session on any node (none to report): 1 refused by a node for want of room "+
		"(1 of them while a session whose job Slurm had ended held room), 1 with no refusal logged") {
		t.Errorf("note: %s", note)
	}
	if len(out) != 2 || !strings.Contains(out[0], "held by 43 8GiB (its job ended 5s before), 41 4GiB (released, waiting for its processes)") ||
		!strings.Contains(out[1], "51 FAILED on tn2: no node's gpusliced refused it") {
		t.Errorf("lines: %q", out)
	}
}
