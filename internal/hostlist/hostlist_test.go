package hostlist

import (
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	for in, want := range map[string]string{
		"tn1":             "tn1",
		"tn[1-3,5],gpu01": "tn1 tn2 tn3 tn5 gpu01",
		"n[08-10]":        "n08 n09 n10",
		"r[1-2]n[1-2]":    "r1n1 r1n2 r2n1 r2n2",
		"a-b[1-2].x,c":    "a-b1.x a-b2.x c",
		"":                "",
	} {
		got, err := Expand(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("Expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tn[1-", "tn[3-1]", "tn[a]", "tn]1", "n[0-99999999]"} {
		if got, err := Expand(bad); err == nil {
			t.Errorf("Expand(%q) = %q, want an error", bad, got)
		}
	}
}
