// Command realgpudoc renders the results of one run of the real-GPU suite
// (tests/gpu) into docs/real-gpu.md; it refuses a run on fakecuda:
//
//	go run ./cmd/realgpudoc -o docs/real-gpu.md build/gpu/results.jsonl
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gpuslice/gpuslice/internal/realgpu"
)

func run() error {
	out := flag.String("o", "", "output file (default: standard output)")
	flag.Parse()
	if flag.NArg() != 1 {
		return fmt.Errorf("usage: realgpudoc [-o FILE] RESULTS.jsonl (one run of tests/gpu on a real GPU)")
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		return fmt.Errorf("results: %w (fetch a GPU run's file first: tests/gpu/README.md)", err)
	}
	recs, err := realgpu.Parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("results %s: %w", flag.Arg(0), err)
	}
	var b bytes.Buffer
	if err := realgpu.Render(&b, recs, time.Now()); err != nil {
		return fmt.Errorf("results %s: %w; %s is left as it was", flag.Arg(0), err, orStdout(*out))
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

func orStdout(path string) string {
	if path == "" {
		return "nothing"
	}
	return path
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "realgpudoc:", err)
		os.Exit(1)
	}
}
