package daemon

import (
	"errors"
	"sync"

	"github.com/gpuslice/gpuslice/daemon/gpu"
)

// gpuFree reads a GPU's free memory through the audit's NVML source, for
// the IPC server to tell a real refusal in a SHORT
// (ipcserver.Options.Free). It reads nothing until the audit has opened
// its source, and nothing once the audit has closed it.
type gpuFree struct {
	mu  sync.RWMutex
	src *gpu.Processes
}

var errNoSource = errors.New("the audit's NVML source is not open")

// read is ipcserver.Options.Free.
func (f *gpuFree) read(i int) (uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.src == nil {
		return 0, errNoSource
	}
	return f.src.Free(i)
}

// set makes src the source (nil: none), once no read is using the one
// before.
func (f *gpuFree) set(src *gpu.Processes) {
	f.mu.Lock()
	f.src = src
	f.mu.Unlock()
}
