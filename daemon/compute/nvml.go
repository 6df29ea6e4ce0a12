package compute

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	nvmlgpu "github.com/gpuslice/gpuslice/daemon/gpu"
)

// NVMLBusy measures GPU time per process from the driver:
// nvmlDeviceGetProcessUtilization's samples (each a process's percent of
// one sample period) since the last read.
type NVMLBusy struct {
	lib    nvml.Interface
	devs   []nvml.Device
	seen   []uint64 // newest sample timestamp read, per GPU (us)
	Period float64  // the driver's sample period, ns
}

// OpenNVMLBusy loads NVML (libPath, else the default lookup) for n GPUs.
func OpenNVMLBusy(libPath string, n int) (*NVMLBusy, error) {
	lib, devs, err := nvmlgpu.OpenDevices(libPath, n, "nvmlDeviceGetProcessUtilization", "has no per-process utilisation")
	if err != nil {
		return nil, err
	}
	return &NVMLBusy{lib: lib, devs: devs, seen: make([]uint64, n), Period: 100e6}, nil
}

// processUtilization calls go-nvml's wrapper, which sizes its buffer with
// a first call and slices it with the count of the second: when samples
// arrive between the two, NVML answers INSUFFICIENT_SIZE with the larger
// count and the wrapper panics (go-nvml v0.13.0-1, device.go:1912). That
// is a retry at the next pass, never a dead daemon.
func processUtilization(dev nvml.Device, since uint64) (s []nvml.ProcessUtilizationSample, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			s, ret = nil, nvml.ERROR_INSUFFICIENT_SIZE
		}
	}()
	return dev.GetProcessUtilization(since)
}

// Busy returns, per GPU index and pid, the ns of GPU time in the samples
// that appeared since the last call.
func (b *NVMLBusy) Busy() (map[int]map[uint32]float64, error) {
	out := map[int]map[uint32]float64{}
	for i, dev := range b.devs {
		samples, ret := processUtilization(dev, b.seen[i])
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INSUFFICIENT_SIZE { // none, or more arrived meanwhile: next pass
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d process utilisation: %s", i, b.lib.ErrorString(ret))
		}
		m := map[uint32]float64{}
		for _, s := range samples {
			m[s.Pid] += float64(s.SmUtil) / 100 * b.Period
			b.seen[i] = max(b.seen[i], s.TimeStamp)
		}
		out[i] = m
	}
	return out, nil
}

// Close unloads NVML.
func (b *NVMLBusy) Close() { b.lib.Shutdown() }
