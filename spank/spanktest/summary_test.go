package spanktest

import (
	"encoding/json"
	"strings"
	"testing"
)

type sgpu struct {
	UUID        string `json:"uuid"`
	Index       int    `json:"index"`
	Name        string `json:"name"`
	Physical    uint64 `json:"physical_bytes"`
	Limit       uint64 `json:"limit_bytes"`
	Used        uint64 `json:"used_bytes"`
	Peak        uint64 `json:"peak_bytes"`
	Denied      uint64 `json:"denied"`
	Enforcement string `json:"enforcement,omitempty"`
}

// session renders a session object as gpusliced's STATUS does (the
// fields around the GPUs included).
func session(t *testing.T, gpus ...sgpu) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": "42", "uid": 1000, "created": "2026-11-29T08:00:00Z",
		"gpus": gpus, "processes": []map[string]any{{"pid": 1, "slot": 0, "used_bytes": map[string]uint64{"GPU-x": 1}}},
		"usage_source": "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

// The end-of-step lines (spank/summary.c) from gpusliced's session object.
func TestSummaryLines(t *testing.T) {
	g := func(i int, peak, limit, denied uint64) sgpu {
		return sgpu{UUID: "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b", Index: i, Name: `NVIDIA "H100" {80GB}, \o/`,
			Physical: 80 * gib, Limit: limit, Peak: peak, Denied: denied}
	}
	for _, tc := range []struct {
		name string
		gpus []sgpu
		want string
	}{
		{"well below", []sgpu{g(0, 5222*mib, 8*gib, 0)},
			"gpuslice: job 42 (step 0 on tn1): GPU memory peak 5.1GiB of its 8GiB quota (64%), no allocation refused\n" +
				"gpuslice: job 42 used well below its quota: next time --gpu-mem=6G would do (its peak plus a margin)\n"},
		{"fits", []sgpu{g(0, 7*gib, 8*gib, 0)},
			"gpuslice: job 42 (step 0 on tn1): GPU memory peak 7GiB of its 8GiB quota (88%), no allocation refused\n"},
		{"refused", []sgpu{g(0, 900*mib, gib, 1)},
			"gpuslice: job 42 (step 0 on tn1): GPU memory peak 900MiB of its 1GiB quota (88%), 1 allocation refused\n" +
				"gpuslice: job 42 reached its quota: next time ask for more, e.g. --gpu-mem=1536M\n"},
		{"two GPUs", []sgpu{g(0, 2*gib, 8*gib, 0), g(3, 8*gib, 8*gib, 4)},
			"gpuslice: job 42 (step 0 on tn1): GPU memory peak 2GiB of its 8GiB quota (25%) on GPU 0, 8GiB of 8GiB (100%) on GPU 3; 4 allocations refused\n" +
				"gpuslice: job 42 reached its quota: next time ask for more, e.g. --gpu-mem=10G\n"},
		{"unused", []sgpu{g(0, 0, 8*gib, 0)},
			"gpuslice: job 42 (step 0 on tn1): GPU memory peak 0B of its 8GiB quota (0%), no allocation refused\n" +
				"gpuslice: job 42 used well below its quota: next time --gpu-mem=256M would do (its peak plus a margin)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(session(t, tc.gpus...), "42", "step 0", "tn1", 2048); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	t.Run("cut short: whole lines", func(t *testing.T) {
		got := Summary(session(t, g(0, 5222*mib, 8*gib, 0)), "42", "step 0", "tn1", 60)
		if len(got) == 0 || len(got) > 60 || !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
			t.Errorf("%q", got)
		}
	})
	for _, bad := range []string{"", "{", `{"gpus":{}}`, `{"gpus":[]}`, `{"gpus":[{"index":0,`, `[1,2]`, `{"id":"42"}`, `{"gpus":[1]}`} {
		if got := Summary(bad, "42", "step 0", "tn1", 2048); got != "" {
			t.Errorf("%q: %q, want nothing", bad, got)
		}
	}
}

// Whatever gpusliced's answer holds, the reader stays within it and
// writes at most whole lines within the buffer.
func FuzzSummary(f *testing.F) {
	f.Add(`{"gpus":[{"index":0,"limit_bytes":8589934592,"peak_bytes":5000000000,"denied":0}]}`)
	f.Add(`{"gpus":[{"name":"a\"}]","index":1}],"x":[{"y":"]"}]}`)
	f.Add(`{"gpus":[{"index":0},{"index":1},{"index":2},{"index":3},{"index":4},{"index":5},{"index":6},{"index":7},{"index":8},{"index":9},{"index":10},{"index":11},{"index":12},{"index":13},{"index":14},{"index":15},{"index":16}]}`)
	// gpusliced's whole session object (escapes, nested objects and lists
	// around the GPUs), quotas at and past the peak, numbers past 2^64,
	// and the malformed answers TestSummaryLines refuses.
	f.Add(`{"id":"42","uid":1000,"created":"2026-11-29T08:00:00Z","gpus":[{"uuid":"GPU-0fb77ae2","index":0,"name":"NVIDIA \"H100\" {80GB}, \\o/","physical_bytes":85899345920,"limit_bytes":1073741824,"used_bytes":0,"peak_bytes":943718400,"denied":1,"enforcement":"ledger"},{"index":3,"limit_bytes":8589934592,"peak_bytes":8589934592,"denied":4}],"processes":[{"pid":1,"slot":0,"used_bytes":{"GPU-x":1}}],"usage_source":"ledger"}`)
	f.Add(`{ "gpus" : [ { "index" : 18446744073709551616 , "limit_bytes" : 99999999999999999999999 , "peak_bytes" : 18446744073709551615 , "denied" : 18446744073709551615 } , { "denied" : 1 } ] }`)
	for _, bad := range []string{"", "{", `{"gpus":{}}`, `{"gpus":[]}`, `{"gpus":[{"index":0,`, `[1,2]`, `{"id":"42"}`, `{"gpus":[1]}`} {
		f.Add(bad)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Summary(s, "42", "step 0", "tn1", 512)
		if len(got) >= 512 || (got != "" && !strings.HasSuffix(got, "\n")) {
			t.Fatalf("%q -> %q", s, got)
		}
	})
}
