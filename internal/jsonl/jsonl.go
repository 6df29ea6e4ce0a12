// Package jsonl reads the results files the test suites write: one JSON
// object a line (internal/compat's rows, internal/realgpu's cases).
package jsonl

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// Each calls fn with every non-blank line of r, trimmed, and its number
// (from 1), until fn returns an error, which Each returns as it is. A
// line longer than maxLine bytes, or a read error, is "read: ...".
func Each(r io.Reader, maxLine int, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}
