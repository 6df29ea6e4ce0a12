package fakecuda

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML reports, per device, the memory every process holds and each process
// with its own usage, like nvidia-smi; v1 and v2 memory queries agree.
func TestNVMLPerProcessUsage(t *testing.T) {
	n := newNode(t, "2x4GiB")
	a := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "256MiB", "--count", "3", "--hold", "60", "--exit-without-free")
	b := n.start([]string{"CUDA_VISIBLE_DEVICES=1"}, "hold", "target_app", "--step", "1GiB", "--count", "1", "--hold", "60", "--exit-without-free")
	c := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "512MiB", "--count", "1", "--hold", "60", "--exit-without-free")

	q := n.run(nil, "nvml_query").ok(t)
	mem, mem2 := q.all("memory"), q.all("memory_v2")
	if len(mem) != 2 || len(mem2) != 2 {
		t.Fatalf("memory events: %v %v", mem, mem2)
	}
	wantUsed := []int64{768*MiB + 512*MiB, GiB}
	for i := range mem {
		if mem[i].int(t, "used") != wantUsed[i] || mem[i].int(t, "free") != 4*GiB-wantUsed[i] {
			t.Errorf("device %d memory %v: want used=%d", i, mem[i], wantUsed[i])
		}
		if mem2[i]["used"] != mem[i]["used"] || mem2[i]["free"] != mem[i]["free"] || mem2[i]["total"] != mem[i]["total"] {
			t.Errorf("device %d: v2 %v disagrees with v1 %v", i, mem2[i], mem[i])
		}
	}
	procs := map[string]string{}
	for _, p := range q.all("process") {
		procs[p["index"]+"/"+p["pid"]] = p["used"]
	}
	want := map[string]int64{
		"0/" + strconv.Itoa(a.pid()): 768 * MiB,
		"1/" + strconv.Itoa(b.pid()): GiB,
		"0/" + strconv.Itoa(c.pid()): 512 * MiB,
	}
	if len(procs) != len(want) {
		t.Errorf("processes %v, want %v", procs, want)
	}
	for k, v := range want {
		if procs[k] != strconv.FormatInt(v, 10) {
			t.Errorf("process %s used %q, want %d (all: %v)", k, procs[k], v, procs)
		}
	}

	// a clean exit gives everything back at once, without a cuMemFree
	for _, bg := range []*background{a, b, c} {
		if code := bg.release(t); code != 0 {
			t.Fatalf("target_app exited %d", code)
		}
		if bg.lines[len(bg.lines)-1]["event"] != "exit" {
			t.Fatalf("target_app did not exit holding its memory: %v", bg.lines)
		}
	}
	q = n.run(nil, "nvml_query").ok(t)
	for _, m := range q.all("memory") {
		if m["used"] != "0" {
			t.Errorf("after exit: %v", m)
		}
	}
	if ps := q.all("process"); len(ps) != 0 {
		t.Errorf("after exit NVML lists %v", ps)
	}
}

// What the daemon calls through github.com/NVIDIA/go-nvml works against
// fakecuda's NVML, loaded the way go-nvml loads it.
func TestGoNVML(t *testing.T) {
	n := newNode(t, "80GiB,40GiB")
	t.Setenv("FAKECUDA_DEVICES", n.devices)
	t.Setenv("FAKECUDA_STATE", n.state)
	holder := n.start(nil, "hold", "target_app", "--api", "driver", "--device", "1", "--step", "3GiB", "--count", "1", "--hold", "30")

	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(n.lib(), "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	if v, ret := lib.SystemGetDriverVersion(); ret != nvml.SUCCESS || v == "" {
		t.Errorf("SystemGetDriverVersion: %q %v", v, ret)
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS || v != 12060 {
		t.Errorf("SystemGetCudaDriverVersion: %d %v", v, ret)
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || count != 2 {
		t.Fatalf("DeviceGetCount: %d %v", count, ret)
	}
	totals := []uint64{80 << 30, 40 << 30}
	for i := 0; i < count; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS || len(uuid) != 40 {
			t.Fatalf("GetUUID: %q %v", uuid, ret)
		}
		byUUID, ret := lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			t.Errorf("DeviceGetHandleByUUID(%s): %v", uuid, ret)
		} else if idx, _ := byUUID.GetIndex(); idx != i {
			t.Errorf("DeviceGetHandleByUUID(%s) gives index %d, want %d", uuid, idx, i)
		}
		if name, ret := d.GetName(); ret != nvml.SUCCESS || name == "" {
			t.Errorf("GetName: %q %v", name, ret)
		}
		m, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS || m.Total != totals[i] || m.Used+m.Free != m.Total {
			t.Errorf("device %d GetMemoryInfo: %+v %v", i, m, ret)
		}
		m2, ret := d.GetMemoryInfo_v2()
		if ret != nvml.SUCCESS || m2.Total != totals[i] || m2.Used != m.Used {
			t.Errorf("device %d GetMemoryInfo_v2: %+v %v", i, m2, ret)
		}
		procs, ret := d.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			t.Fatalf("GetComputeRunningProcesses: %v", ret)
		}
		if i == 1 {
			if len(procs) != 1 || int(procs[0].Pid) != holder.pid() || procs[0].UsedGpuMemory != 3<<30 || m.Used != 3<<30 {
				t.Errorf("device 1: processes %+v, used %d: want pid %d holding 3 GiB", procs, m.Used, holder.pid())
			}
		} else if len(procs) != 0 || m.Used != 0 {
			t.Errorf("device 0: processes %+v, used %d: want none", procs, m.Used)
		}
		// No graphics context on a GPU without a display: an empty list,
		// not an error (Slurm's gpu/nvml reads it at every sample).
		if g, ret := d.GetGraphicsRunningProcesses(); ret != nvml.SUCCESS || len(g) != 0 {
			t.Errorf("device %d GetGraphicsRunningProcesses: %+v %v, want none and success", i, g, ret)
		}
	}
	if _, ret := lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("unknown UUID: %v", ret)
	}
}
