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
	lib, devs, err := OpenDevices(libPath, n, "nvmlDeviceGetComputeRunningProcesses", "cannot list running processes")
	if err != nil {
		return nil, err
	}
	return &Processes{lib: lib, devs: devs}, nil
}

// OpenDevices loads NVML (from libPath when set, else the default
// libnvidia-ml.so.1 lookup), checks that it has the symbol its caller
// needs (lacking says what is then missing), and returns it initialised
// with the handles of GPUs 0..n-1. go-nvml binds symbols lazily: a
// library without one would kill the daemon at the first call instead of
// returning an error.
func OpenDevices(libPath string, n int, symbol, lacking string) (nvml.Interface, []nvml.Device, error) {
	where := "libnvidia-ml.so.1"
	if libPath != "" {
		where = libPath
	}
	l := dl.New(where, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := l.Open(); err != nil {
		return nil, nil, fmt.Errorf("load NVML: %w", err)
	}
	err := l.Lookup(symbol)
	l.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("NVML %s %s: %w", where, lacking, err)
	}
	lib := nvml.New()
	if libPath != "" {
		lib = nvml.New(nvml.WithLibraryPath(libPath))
	}
	if err := initLib(lib); err != nil {
		return nil, nil, fmt.Errorf("load NVML (%s): %w", where, err)
	}
	devs := make([]nvml.Device, 0, n)
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, nil, fmt.Errorf("NVML device %d: %s", i, lib.ErrorString(ret))
		}
		devs = append(devs, dev)
	}
	return lib, devs, nil
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

// Free is the device memory the driver has free on GPU i now.
func (p *Processes) Free(i int) (uint64, error) {
	if i < 0 || i >= len(p.devs) {
		return 0, fmt.Errorf("no GPU %d", i)
	}
	mem, ret := p.devs[i].GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML device %d memory: %s", i, p.lib.ErrorString(ret))
	}
	return mem.Free, nil
}
