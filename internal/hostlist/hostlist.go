// Package hostlist expands Slurm hostlists (tn[1-3,5],gpu01).
package hostlist

import (
	"fmt"
	"strconv"
	"strings"
)

// Expand expands a Slurm hostlist as slurmd gives it to the
// Prolog and Epilog (SLURM_JOB_NODELIST): "tn[1-3,5],gpu01" is tn1, tn2,
// tn3, tn5, gpu01; zero-padded ranges keep their width ("n[08-10]"), and
// a name may have several bracketed parts ("r[1-2]n[1-2]").
func Expand(s string) ([]string, error) {
	var out []string
	for _, item := range splitTop(strings.TrimSpace(s)) {
		if item == "" {
			continue
		}
		names, err := expandItem(item)
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTop splits at the commas outside brackets.
func splitTop(s string) []string {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	return append(items, s[start:])
}

// maxHosts bounds what one hostlist may expand to.
const maxHosts = 1 << 16

func expandItem(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("%q: unbalanced brackets", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: unbalanced brackets", item)
	}
	prefix, ranges, rest := item[:open], item[open+1:open+end], item[open+end+1:]
	tails, err := expandItem(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%q: bad range %q", item, r)
		}
		if len(out)+(b-a+1)*len(tails) > maxHosts {
			return nil, fmt.Errorf("%q: more than %d hosts", item, maxHosts)
		}
		for i := a; i <= b; i++ {
			num := fmt.Sprintf("%0*d", len(lo), i)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
