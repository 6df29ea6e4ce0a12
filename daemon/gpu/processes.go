package gpu

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpuslice/gpuslice/daemon/audit"
)

// Processes reads each GPU's running processes and the device memory each
// holds, as the driver reports it (NVML compute and graphics processes):
// the audit's source.
type Processes struct {
	lib  nvml.Interface
	devs []nvml.Device
}

// OpenProcesses loads NVML (as Inventory does) and keeps it open.
func OpenProcesses(libPath string, n int) (*Processes, error) {
	where := "libnvidia-ml.so.1"
	if libPath != "" {
		where = libPath
	}
	// go-nvml binds symbols lazily: a library without them would kill the
	// daemon at the first call instead of returning an error.
	l := dl.New(where, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := l.Open(); err != nil {
		return nil, fmt.Errorf("load NVML: %w", err)
	}
	err := l.Lookup("nvmlDeviceGetComputeRunningProcesses")
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("NVML %s cannot list running processes: %w", where, err)
	}
	var lib nvml.Interface
	if libPath != "" {
		lib = nvml.New(nvml.WithLibraryPath(libPath))
	} else {
		lib = nvml.New()
	}
	if err := initLib(lib); err != nil {
		return nil, fmt.Errorf("load NVML (%s): %w", where, err)
	}
	p := &Processes{lib: lib}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("NVML device %d: %s", i, lib.ErrorString(ret))
		}
		p.devs = append(p.devs, dev)
	}
	return p, nil
}

// Read lists every process holding memory on every GPU.
func (p *Processes) Read() ([]audit.Sample, error) {
	var out []audit.Sample
	for i, dev := range p.devs {
		procs, ret := dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d running processes: %s", i, p.lib.ErrorString(ret))
		}
		for _, pr := range procs {
			if pr.UsedGpuMemory == math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				continue
			}
			out = append(out, audit.Sample{PID: pr.Pid, GPU: i, Bytes: pr.UsedGpuMemory})
		}
	}
	return out, nil
}

// Close unloads NVML.
func (p *Processes) Close() { p.lib.Shutdown() }
