// Command gpuslice is the command-line client of gpusliced.
package main

import (
	"os"

	"github.com/gpuslice/gpuslice/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
