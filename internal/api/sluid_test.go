package api

import "testing"

func TestCanonicalSLUID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"sEKNKTV3WPV500", "sEKNKTV3WPV500", true}, // cgroup.conf(5)'s example
		{"SEKNKTV3WPV500", "sEKNKTV3WPV500", true},
		{"seknktv3wpv500", "sEKNKTV3WPV500", true},
		{"s0000000000000", "s0000000000000", true},
		{"sFZZZZZZZZZZZZ", "sFZZZZZZZZZZZZ", true}, // the largest 65-bit value Slurm prints from 64 bits
		{"sGZZZZZZZZZZZZ", "", false},              // top character carries 4 bits only
		{"sEKNKTV3WPV50", "", false},               // 13 characters
		{"sEKNKTV3WPV5000", "", false},             // 15
		{"xEKNKTV3WPV500", "", false},
		{"sEKNKTV3WPVI00", "", false}, // I, L, O, U are not Crockford symbols
		{"sEKNKTV3WPVL00", "", false},
		{"sEKNKTV3WPVO00", "", false},
		{"sEKNKTV3WPVU00", "", false},
		{"sEKNKTV3WPV-00", "", false},
		{"sEKNKTV3WPV/00", "", false},
		{"job_123", "", false},
		{"", "", false},
	} {
		got, ok := CanonicalSLUID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CanonicalSLUID(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if IsCanonicalSLUID("SEKNKTV3WPV500") || IsCanonicalSLUID("seknktv3wpv500") || !IsCanonicalSLUID("sEKNKTV3WPV500") {
		t.Error("IsCanonicalSLUID accepts only Slurm's printed form")
	}
}
