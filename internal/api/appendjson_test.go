package api

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

func TestAppendSessionJSONMatchesEncodingJSON(t *testing.T) {
	now := time.Date(2026, 11, 24, 7, 1, 2, 123456789, time.UTC)
	cases := []Session{
		{},
		{ID: "job-1", UID: 1000, Created: now, Updated: now.Add(time.Second), TTLSeconds: 3600,
			Expires: now.Add(time.Hour).In(time.FixedZone("x", 3600)), GPUs: []SessionGPU{}, Processes: []Process{}},
		{ID: "2600", GPUs: []SessionGPU{{UUID: "GPU-c", Enforcement: EnforcementDriver}}, Processes: []Process{}, SLUID: "sEKNKTV3WPV500"},
		{ID: `odd "id" <&> é \ ` + "\x01", UID: 1 << 31, Created: now.Truncate(time.Second), TTLSeconds: -1,
			GPUs: []SessionGPU{
				{UUID: "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b", Index: -1, Name: "NVIDIA A100-SXM4-80GB",
					PhysicalBytes: 80 << 30, LimitBytes: 1<<64 - 1, UsedBytes: 12, PeakBytes: 13, Denied: 14, Enforcement: EnforcementInterceptor},
				{UUID: "GPU-b", Index: 3, Name: "fake <gpu> \u2028"},
			},
			Processes: []Process{{PID: 42, Slot: 4095, Attached: now,
				UsedBytes: map[string]uint64{"GPU-b": 1, "GPU-a": 2}}}, SLUID: "s0000000000001"},
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

// Times and strings against encoding/json one by one: UTC times across the
// years and fractions (trailing zeros, none), other zones, every byte.
func TestAppendTimeAndStringMatchEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{{}, time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("y", -5*3600))}
	for i := 0; i < 2000; i++ {
		sec := rng.Int64N(253402300799+62135596800) - 62135596800 // years 1..9999
		ns := rng.Int64N(1e9)
		switch rng.IntN(3) {
		case 0:
			ns -= ns % 1e6 // trailing zeros
		case 1:
			ns = 0
		}
		times = append(times, time.Unix(sec, ns).UTC())
	}
	for _, tm := range times {
		want, _ := json.Marshal(tm)
		if got := appendTime(nil, tm); string(got) != string(want) {
			t.Fatalf("time %v: got %s, want %s", tm, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		s := "a" + string([]byte{byte(c)}) + "b"
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("byte %#x: got %s, want %s", c, got, want)
		}
	}
}
