// Package version holds the build version, stamped at link time:
//
//	go build -ldflags "-X github.com/gpuslice/gpuslice/internal/version.Version=1.2.3"
package version

import "runtime"

// Version is the release version; "dev" when not stamped.
var Version = "dev"

// String is the one-line version text printed by --version.
func String(program string) string {
	return program + " " + Version + " (" + runtime.Version() + ")"
}
