// Command gpuslice-epilog is the Slurm Epilog of gpuslice: it releases the
// job's session; gpusliced keeps its report (docs/slurm.md).
package main

import (
	"os"

	"github.com/gpuslice/gpuslice/prolog"
)

func main() {
	os.Exit(prolog.Main(prolog.ModeEpilog, os.Args[1:], os.Getenv, os.Stderr))
}
