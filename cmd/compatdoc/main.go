// Command compatdoc renders build/compat/*.jsonl into docs/compatibility.md:
//
//	go run ./cmd/compatdoc -o docs/compatibility.md build/compat/*.jsonl
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/compat"
)

func run() error {
	out := flag.String("o", "", "output file (default: standard output)")
	flag.Parse()
	suites, err := compat.Load(flag.Args())
	if errors.Is(err, compat.ErrNoResults) {
		return fmt.Errorf("%w: the suites recorded nothing (skipped? see build/nvidia/UNREACHABLE); "+
			"docs/compatibility.md is left as it was", err)
	}
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := compat.Render(&b, suites); err != nil {
		return err
	}
	if *out == "" {
		_, err = os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compatdoc:", err)
		os.Exit(1)
	}
}
