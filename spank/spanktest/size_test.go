package spanktest

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/size"
)

func TestParse(t *testing.T) {
	const (
		K = uint64(1) << 10
		M = uint64(1) << 20
		G = uint64(1) << 30
		T = uint64(1) << 40
	)
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"8G", 8 * G, true},
		{"8g", 8 * G, true},
		{"512M", 512 * M, true},
		{"8192", 8192 * M, true}, // Slurm --mem: default unit MB
		{"1K", K, true},
		{"2T", 2 * T, true},
		{"4GiB", 4 * G, true},
		{"4GB", 4 * G, true},
		{"100B", 100, true},
		{" 8G ", 8 * G, true},
		{"8 G", 8 * G, true},
		{"0", 0, true}, // syntax ok; --gpu-mem rejects zero separately
		{"18446744073709551615B", 1<<64 - 1, true},
		{"8X", 0, false},
		{"-1", 0, false},
		{"+1G", 0, false},
		{"", 0, false},
		{"   ", 0, false},
		{"G", 0, false},
		{"1.5G", 0, false},
		{"8GG", 0, false},
		{"8G8", 0, false},
		{"0x10", 0, false},
		{"16777216T", 0, false}, // 2^64 bytes
		{"18446744073709551616B", 0, false},
		{"99999999999999999999999", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := Parse(tt.in)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("gs_parse_size(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
			}
			goGot, err := size.Parse(tt.in)
			if (err == nil) != ok || goGot != got {
				t.Fatalf("C and Go disagree on %q: C %d,%v; Go %d,%v", tt.in, got, ok, goGot, err)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []uint64{0, 1, 1023, 1024, 1536, 8 << 30, 3 << 29, 512 << 20, 80 << 30, 1 << 40, 1<<64 - 1}
	for _, b := range tests {
		t.Run(size.Format(b), func(t *testing.T) {
			if got, want := Format(b), size.Format(b); got != want {
				t.Fatalf("gs_format_size(%d) = %q, Go says %q", b, got, want)
			}
		})
	}
}

// FuzzParse checks that the plugin and internal/size accept exactly the
// same ASCII inputs with the same values. Go also trims Unicode blanks
// (U+00A0, U+0085, ...) that the C parser rejects; for such input the C
// side may only be stricter, never accept a different value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"8G\u00a0", "8G", "512m", "8192", "4GiB", "100B", " 1 t ", "-1", "8X", "1.5G", "18446744073709551615B"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return // C strings end at NUL
		}
		c, ok := Parse(s)
		g, err := size.Parse(s)
		if !isASCII(s) && !ok {
			return
		}
		if ok != (err == nil) || c != g {
			t.Fatalf("C and Go disagree on %q: C %d,%v; Go %d,%v", s, c, ok, g, err)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
