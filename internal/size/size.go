// Package size parses and formats memory sizes.
//
// Parse follows Slurm's --mem syntax: a whole number with an optional unit
// suffix K, M, G or T (powers of 1024); a bare number means megabytes.
// The binary spellings KiB, MiB, GiB, TiB (and KB/MB/GB/TB, also powers of
// 1024, as Slurm reads them) are accepted too, and a B suffix means bytes.
package size

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Units in bytes.
const (
	KiB uint64 = 1 << 10
	MiB uint64 = 1 << 20
	GiB uint64 = 1 << 30
	TiB uint64 = 1 << 40
)

// ErrSyntax is returned (wrapped) for input that is not a size.
var ErrSyntax = errors.New("invalid size")

var units = map[string]uint64{
	"":    MiB, // Slurm: default unit is megabytes
	"b":   1,
	"k":   KiB,
	"kb":  KiB,
	"kib": KiB,
	"m":   MiB,
	"mb":  MiB,
	"mib": MiB,
	"g":   GiB,
	"gb":  GiB,
	"gib": GiB,
	"t":   TiB,
	"tb":  TiB,
	"tib": TiB,
}

// Parse converts a size such as "8G", "512M", "1024" (MiB), "4GiB" or
// "4096B" into bytes. Zero is allowed; negative, fractional, overflowing or
// unknown-unit input is an error wrapping ErrSyntax.
func Parse(s string) (uint64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && in[i] >= '0' && in[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%w %q: expected a whole number with an optional unit K, M, G or T (e.g. 8G, 512M)", ErrSyntax, s)
	}
	n, err := strconv.ParseUint(in[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: number out of range", ErrSyntax, s)
	}
	unit, ok := units[strings.ToLower(strings.TrimSpace(in[i:]))]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (use K, M, G, T, KiB, MiB, GiB, TiB or B)", ErrSyntax, s, in[i:])
	}
	if n != 0 && n > math.MaxUint64/unit {
		return 0, fmt.Errorf("%w %q: too large", ErrSyntax, s)
	}
	return n * unit, nil
}

// Format renders bytes in the largest binary unit that keeps the value
// readable: "8GiB", "1.5GiB", "512MiB", "100B".
func Format(b uint64) string {
	type u struct {
		name string
		v    uint64
	}
	for _, x := range []u{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b >= x.v {
			if b%x.v == 0 {
				return strconv.FormatUint(b/x.v, 10) + x.name
			}
			return strconv.FormatFloat(float64(b)/float64(x.v), 'f', 1, 64) + x.name
		}
	}
	return strconv.FormatUint(b, 10) + "B"
}
