// Command gpuslice-prolog is the Slurm Prolog of gpuslice: it creates the
// job's GPU-memory quota session in gpusliced (docs/slurm.md).
package main

import (
	"os"

	"github.com/gpuslice/gpuslice/prolog"
)

func main() {
	os.Exit(prolog.Main(prolog.ModeProlog, os.Args[1:], os.Getenv, os.Stderr))
}
