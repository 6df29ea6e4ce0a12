package docs

// README's first screen (its first 40 lines) says what gpuslice is, the
// two commands, what a user types and sees, and where the admin guide is.
// The lines it shows are the product's: the refusal line holds every piece
// of the interceptor's refusal line that a quota given with --gpu-mem
// prints, in order, and each step-end line is one of the plugin's.

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

const firstScreen = 40

func TestReadmeFirstScreen(t *testing.T) {
	root := testenv.RepoRoot(t)
	lines := strings.Split(read(t, root, "README.md"), "\n")
	if len(lines) > firstScreen {
		lines = lines[:firstScreen]
	}
	screen := strings.Join(lines, "\n")
	for _, want := range []string{"make demo", "make test", "srun --gpu-mem=", "(docs/install.md)", "(docs/user-guide.md)"} {
		if !strings.Contains(screen, want) {
			t.Errorf("README's first %d lines do not show %q", firstScreen, want)
		}
	}
	msgs, _ := findMessages(t, root)
	var refusal []string // the interceptor's pieces of the refusal line, in source order
	var stepEnd []message
	for _, m := range msgs {
		switch {
		case m.file == "native/interceptor/notice.c":
			refusal = append(refusal, m.pieces...)
		case m.file == "spank/summary.c":
			stepEnd = append(stepEnd, m)
		}
	}
	if len(refusal) < 5 || len(stepEnd) < 3 {
		t.Fatalf("the refusal line's pieces (%d) or the step-end lines (%d) are not found in the code", len(refusal), len(stepEnd))
	}
	var sawRefusal, sawStepEnd bool
	for _, l := range lines {
		l = squash(l)
		if !strings.HasPrefix(l, "gpuslice: ") {
			continue
		}
		if strings.Contains(l, " was refused: ") {
			sawRefusal = true
			// The pieces of a quota given with --gpu-mem, the line's last
			// one aside (the fifth line's).
			at := 0
			for _, p := range refusal {
				if strings.Contains(p, "cluster's default") || strings.Contains(p, "no more of these lines") {
					continue
				}
				k := strings.Index(l[at:], p)
				if k < 0 {
					t.Errorf("README's refusal line lacks %q (after %q): %s", p, l[:at], l)
					break
				}
				at += k + len(p)
			}
			continue
		}
		ok := false
		for _, m := range stepEnd {
			if onPage(m, []string{l}) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("README shows %q, which is no line of the plugin's at the step's end", l)
		}
		sawStepEnd = true
	}
	if !sawRefusal || !sawStepEnd {
		t.Errorf("README's first %d lines show no refusal line (%v) or no step-end line (%v)", firstScreen, sawRefusal, sawStepEnd)
	}
}
