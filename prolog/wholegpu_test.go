package prolog

import "testing"

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
