package size

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"8G", 8 * GiB, false},
		{"8g", 8 * GiB, false},
		{"512M", 512 * MiB, false},
		{"1024", 1024 * MiB, false},
		{"0", 0, false},
		{"4K", 4 * KiB, false},
		{"2T", 2 * TiB, false},
		{"4GiB", 4 * GiB, false},
		{"4gib", 4 * GiB, false},
		{"16MiB", 16 * MiB, false},
		{"3KiB", 3 * KiB, false},
		{"1TiB", TiB, false},
		{"8GB", 8 * GiB, false},
		{"4096B", 4096, false},
		{" 8G ", 8 * GiB, false},
		{"", 0, true},
		{"G", 0, true},
		{"-1G", 0, true},
		{"1.5G", 0, true},
		{"8X", 0, true},
		{"8 GiBs", 0, true},
		{"99999999999999999999", 0, true},
		{"17179869184T", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.err {
				if err == nil || !errors.Is(err, ErrSyntax) {
					t.Fatalf("Parse(%q) = %d, %v; want ErrSyntax", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0B"},
		{100, "100B"},
		{KiB, "1KiB"},
		{512 * MiB, "512MiB"},
		{8 * GiB, "8GiB"},
		{GiB + GiB/2, "1.5GiB"},
		{80 * GiB, "80GiB"},
		{3 * TiB, "3TiB"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := Format(tc.in); got != tc.want {
				t.Fatalf("Format(%d) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, b := range []uint64{KiB, 3 * MiB, 8 * GiB, 2 * TiB} {
		f := Format(b)
		got, err := Parse(f)
		if err != nil || got != b {
			t.Fatalf("Parse(Format(%d)=%q) = %d, %v", b, f, got, err)
		}
	}
}
