// Package gpu reads the node's GPU inventory through NVML.
package gpu

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/api"
)

// GPU is one physical GPU.
type GPU struct {
	Index    int
	UUID     string
	Name     string
	Physical uint64 // bytes
	// DriverLimit: the driver enforces memory limits per cgroup on this
	// GPU (NVML's nvmlDeviceSetMemoryLimits_v1, R615+), as found at start
	// (MemLimits.Probe).
	DriverLimit bool
}

// Enforcement is the GPU's api.GPU.Enforcement value.
func (g GPU) Enforcement() string {
	if g.DriverLimit {
		return api.EnforcementDriver
	}
	return api.EnforcementInterceptor
}

// Inventory loads NVML (from libPath when set, else the default
// libnvidia-ml.so.1 lookup) and lists the GPUs in NVML index order.
func Inventory(libPath string) ([]GPU, error) {
	var lib nvml.Interface
	where := "libnvidia-ml.so.1"
	if libPath != "" {
		if _, err := os.Stat(libPath); err != nil {
			return nil, fmt.Errorf("load NVML: %w", err)
		}
		lib = nvml.New(nvml.WithLibraryPath(libPath))
		where = libPath
	} else {
		lib = nvml.New()
	}
	if err := checkSymbols(where); err != nil {
		return nil, err
	}
	if ret := initLib(lib); ret != nil {
		return nil, fmt.Errorf("load NVML (%s): %w", where, ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", lib.ErrorString(ret))
	}
	out := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %s", i, lib.ErrorString(ret))
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d UUID: %s", i, lib.ErrorString(ret))
		}
		name, ret := dev.GetName()
		if ret != nvml.SUCCESS {
			name = "unknown"
		}
		mem, ret := dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d memory: %s", i, lib.ErrorString(ret))
		}
		out = append(out, GPU{Index: i, UUID: uuid, Name: name, Physical: mem.Total})
	}
	return out, nil
}

// checkSymbols opens the library on its own first: go-nvml binds NVML
// symbols lazily, so a library without them would kill the process with a
// symbol lookup error instead of returning one.
func checkSymbols(path string) error {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return fmt.Errorf("load NVML: %w", err)
	}
	defer lib.Close()
	for _, sym := range []string{"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
		"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo", "nvmlErrorString"} {
		if err := lib.Lookup(sym); err != nil {
			return fmt.Errorf("load NVML: %s is not a usable NVML library: %w", path, err)
		}
	}
	return nil
}

// initLib calls Init, turning the panic-free error paths of go-nvml into an
// error (a library that cannot be opened is reported, not fatal).
func initLib(lib nvml.Interface) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlInit: %s", nvmlError(lib, ret))
	}
	return nil
}

func nvmlError(lib nvml.Interface, ret nvml.Return) string {
	defer func() { recover() }()
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "library not found"
	}
	return fmt.Sprintf("%s (%d)", lib.ErrorString(ret), int(ret))
}
