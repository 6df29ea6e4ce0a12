package admincomment

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Set is a set of node indices.
type Set struct{ w []uint64 }

// Put adds i (ignored when out of range).
func (s *Set) Put(i int) {
	if i < 0 || i >= MaxNodes {
		return
	}
	for len(s.w) <= i/64 {
		s.w = append(s.w, 0)
	}
	s.w[i/64] |= 1 << (i % 64)
}

// Has reports whether i is in s.
func (s Set) Has(i int) bool {
	return i >= 0 && i/64 < len(s.w) && s.w[i/64]&(1<<(i%64)) != 0
}

// Len is the number of indices in s.
func (s Set) Len() int {
	n := 0
	for _, w := range s.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// Each calls f for each index, in order.
func (s Set) Each(f func(int)) {
	for wi, w := range s.w {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			f(wi*64 + b)
			w &^= 1 << b
		}
	}
}

func (s Set) clone() Set { return Set{w: append([]uint64(nil), s.w...)} }

// rangesMax is the length past which ranges give way to a shorter bitmap.
const rangesMax = 64

// String writes s as ranges, or as a bitmap when the ranges take more
// than rangesMax characters and the bitmap fewer.
func (s Set) String() string {
	r := s.ranges()
	if m := s.bitmap(); len(r) > rangesMax && len(m) < len(r) {
		return m
	}
	return r
}

func (s Set) ranges() string {
	var b strings.Builder
	start, prev := -2, -2
	flush := func() {
		if start < 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(start))
		if prev > start {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(prev))
		}
	}
	s.Each(func(i int) {
		if i != prev+1 {
			flush()
			start = i
		}
		prev = i
	})
	flush()
	return b.String()
}

func (s Set) bitmap() string {
	last := -1
	s.Each(func(i int) { last = i })
	if last < 0 {
		return ""
	}
	b := make([]byte, 0, 1+last/4+1)
	b = append(b, 'x')
	for d := 0; d <= last/4; d++ {
		v := 0
		for k := 0; k < 4; k++ {
			if s.Has(4*d + k) {
				v |= 8 >> k
			}
		}
		b = append(b, "0123456789abcdef"[v])
	}
	return string(b)
}

// ParseSet reads what Set.String writes.
func ParseSet(v string) (Set, error) {
	var s Set
	if v == "" {
		return s, nil
	}
	if hex, ok := strings.CutPrefix(v, "x"); ok {
		if len(hex)*4 > MaxNodes {
			return s, fmt.Errorf("bitmap of %d digits", len(hex))
		}
		for d, c := range []byte(hex) {
			n := strings.IndexByte("0123456789abcdef", c)
			if n < 0 {
				return s, fmt.Errorf("bitmap digit %q", c)
			}
			for k := 0; k < 4; k++ {
				if n&(8>>k) != 0 {
					s.Put(4*d + k)
				}
			}
		}
		return s, nil
	}
	for _, r := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= MaxNodes {
			return s, fmt.Errorf("range %q", r)
		}
		for i := a; i <= b; i++ {
			s.Put(i)
		}
	}
	return s, nil
}
