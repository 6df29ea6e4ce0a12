// Command realgpudoc renders the results of a run of the real-GPU suite
// (tests/gpu) into docs/real-gpu.md; it refuses a run on fakecuda. Several
// files are runs of one build on one GPU, in order: a later run's line for
// a case replaces the earlier one (run.sh --rest completes a run the
// budget cut short):
//
//	go run ./cmd/realgpudoc -o docs/real-gpu.md build/gpu/results.jsonl [build/gpu/rest.jsonl]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/realgpu"
)

func run() error {
	out := flag.String("o", "", "output file (default: standard output)")
	flag.Parse()
	if flag.NArg() < 1 {
		return fmt.Errorf("usage: realgpudoc [-o FILE] RESULTS.jsonl... (runs of tests/gpu on a real GPU, in order)")
	}
	var all [][]realgpu.Record
	for i, path := range flag.Args() {
		recs, err := parseFile(path)
		if i > 0 && errors.Is(err, realgpu.ErrNoResults) {
			continue // a --rest run that found nothing left to run
		}
		if err != nil {
			return err
		}
		all = append(all, recs)
	}
	recs := realgpu.Merge(all...)
	names := strings.Join(flag.Args(), " ")
	var b bytes.Buffer
	if err := realgpu.Render(&b, recs, time.Now()); err != nil {
		return fmt.Errorf("results %s: %w; %s is left as it was", names, err, orStdout(*out))
	}
	if *out == "" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return nil
}

// parseFile reads one run's results.
func parseFile(path string) ([]realgpu.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("results: %w (fetch a GPU run's file first: tests/gpu/README.md)", err)
	}
	defer f.Close()
	recs, err := realgpu.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("results %s: %w", path, err)
	}
	return recs, nil
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
