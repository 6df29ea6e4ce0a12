// Package advice says what a job should ask for next time (--gpu-mem),
// from what it used: the end-of-step lines of the SPANK plugin
// (spank/advice.c, the same rule in C, checked against this one by
// spank/spanktest) and gpuslice seff.
//
// The ask is the peak plus a margin (an eighth of it, at least 256 MiB),
// rounded up as people write sizes: to 128 MiB up to 1 GiB, to 512 MiB up
// to 16 GiB, to whole GiB above. A peak well below the quota is one whose
// ask is at most three quarters of the quota; a job at its quota (a peak
// within 5 % of it) or refused an allocation is told to ask for more: the
// quota plus a quarter (at least 512 MiB), rounded the same way, since
// what it would have taken is not known.
package advice

import (
	"math"
	"strconv"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

// Kind is what the advice says.
type Kind int

const (
	// None: the quota fits the job.
	None Kind = iota
	// Lower: the peak is well below the quota.
	Lower
	// More: the job reached its quota or was refused an allocation.
	More
)

// String is the kind as it appears in JSON.
func (k Kind) String() string {
	switch k {
	case Lower:
		return "lower"
	case More:
		return "more"
	default:
		return "none"
	}
}

// MarshalText makes Kind a JSON string.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

func roundUp(b, unit uint64) uint64 {
	if b > math.MaxUint64-unit {
		return math.MaxUint64 / unit * unit
	}
	return (b + unit - 1) / unit * unit
}

func nice(b uint64) uint64 {
	switch {
	case b <= gib:
		return roundUp(b, 128*mib)
	case b <= 16*gib:
		return roundUp(b, 512*mib)
	default:
		return roundUp(b, gib)
	}
}

func addSat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// Advise returns the advice for a job whose highest peak on one of its
// GPUs was peak, with quota per GPU and refused allocations refused, and
// the --gpu-mem to ask for in bytes (0 with None).
func Advise(peak, quota, refused uint64) (Kind, uint64) {
	if quota == 0 {
		return None, 0
	}
	if refused > 0 || peak >= quota-quota/20 {
		return More, nice(addSat(quota, max(quota/4, 512*mib)))
	}
	want := nice(addSat(peak, max(peak/8, 256*mib)))
	if want <= quota/4*3 {
		return Lower, want
	}
	return None, 0
}

// Ask writes bytes as a --gpu-mem value: "6G", or "1536M" when not a
// whole number of GiB.
func Ask(b uint64) string {
	if b%gib == 0 {
		return strconv.FormatUint(b/gib, 10) + "G"
	}
	return strconv.FormatUint((b+mib-1)/mib, 10) + "M"
}
