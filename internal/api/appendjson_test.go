package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestAppendSessionJSONMatchesEncodingJSON(t *testing.T) {
	now := time.Date(2026, 11, 24, 7, 1, 2, 123456789, time.UTC)
	cases := []Session{
		{},
		{ID: "job-1", UID: 1000, Created: now, Updated: now.Add(time.Second), TTLSeconds: 3600,
			Expires: now.Add(time.Hour).In(time.FixedZone("x", 3600)), GPUs: []SessionGPU{}, Processes: []Process{}},
		{ID: `odd "id" <&> é \ ` + "\x01", UID: 1 << 31, Created: now.Truncate(time.Second), TTLSeconds: -1,
			GPUs: []SessionGPU{
				{UUID: "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b", Index: -1, Name: "NVIDIA A100-SXM4-80GB",
					PhysicalBytes: 80 << 30, LimitBytes: 1<<64 - 1, UsedBytes: 12, PeakBytes: 13, Denied: 14},
				{UUID: "GPU-b", Index: 3, Name: "fake <gpu> \u2028"},
			},
			Processes: []Process{{PID: 42, Slot: 4095, Attached: now,
				UsedBytes: map[string]uint64{"GPU-b": 1, "GPU-a": 2}}}},
	}
	for i, s := range cases {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendSessionJSON([]byte("x"), s); string(got[1:]) != string(want) || got[0] != 'x' {
			t.Errorf("case %d:\n got %s\nwant %s", i, got[1:], want)
		}
	}
}
