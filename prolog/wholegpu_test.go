package prolog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHasWholeGPUs(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{"JobId=5 JobName=x TresPerNode=gres:gpu:1 MailUser=a", true},
		{"JobId=5 TresPerJob=gres:gpu:2", true},
		{"JobId=5 TresPerNode=gres/gpu:a100:1", true},
		{"JobId=5 TresPerTask=cpu=2", false},
		{"JobId=5 TresPerNode=gres:shard:300", false},
		{"JobId=5 TresPerNode=gres/shard:300,gres/other:1", false},
		{"JobId=5 TresPerSocket=gres/other:1,gres/gpu:1", true},
		{"JobId=5 JobName=gpu:1 Comment=TresPerNode", false},
		{"JobId=5", false},
	}
	for _, tc := range tests {
		if got := HasWholeGPUs(tc.line); got != tc.want {
			t.Errorf("HasWholeGPUs(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

// A scontrol that answers its first call late (slurmctld now and then
// does) is asked again: the job's whole GPUs are found, not taken for a
// failure that would give it the default quota. A missing job is not
// retried.
func TestWholeGPUsRetriesALateAnswer(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "scontrol")
	script := `#!/bin/sh
echo x >> ` + calls + `
[ "$(wc -l < ` + calls + `)" -gt 1 ] || exec sleep 30
[ "$4" = 7 ] && echo "JobId=7 JobName=w TresPerNode=gres/gpu:1 MailUser=u"
exit 0
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	whole, err := WholeGPUs(context.Background(), fake, "7", 500*time.Millisecond, 3)
	if err != nil || !whole {
		t.Fatalf("WholeGPUs = %v, %v; want true after the late first answer", whole, err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "x") != 2 {
		t.Errorf("scontrol called %d times, want 2", strings.Count(string(b), "x"))
	}
	os.Remove(calls)
	if _, err := WholeGPUs(context.Background(), fake, "7", 500*time.Millisecond, 1); err == nil {
		t.Error("one attempt with a late answer: no error")
	}
	os.Remove(calls)
	if b := []byte("x\n"); os.WriteFile(calls, b, 0o644) != nil {
		t.Fatal("calls")
	}
	if _, err := WholeGPUs(context.Background(), fake, "8", 500*time.Millisecond, 3); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("missing job: %v, want a no-such-job error at once", err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "x") != 2 {
		t.Errorf("a missing job was asked %d times, want once", strings.Count(string(b), "x")-1)
	}
}
