// Command gpusliced is the gpuslice node daemon: per-job GPU-memory quotas.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuslice/gpuslice/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := daemon.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
