package plugstack

import (
	"strings"
	"testing"
)

// notice=: what the cluster lets users be told (both by default).
func TestNoticeArgument(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int
		err  string
	}{
		{"", 3, ""},
		{"notice=on", 3, ""},
		{"notice=off", 0, ""},
		{"notice=refusal", 1, ""},
		{"notice=summary", 2, ""},
		{"notice=", 0, "notice=: expected on, off, refusal or summary"},
		{"notice=quiet", 0, "notice=quiet: expected on, off, refusal or summary"},
		{"notices=off", 0, "unknown plugstack.conf argument 'notices'"},
	} {
		err := Parse(tc.line)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want %q", tc.line, err, tc.err)
			continue
		}
		if err == nil && Notice() != tc.want {
			t.Errorf("%q: notice %d, want %d", tc.line, Notice(), tc.want)
		}
	}
}
