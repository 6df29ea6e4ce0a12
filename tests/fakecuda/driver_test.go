package fakecuda

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Allocating past a device's capacity fails with CUDA_ERROR_OUT_OF_MEMORY,
// whichever allocation API is used, and an exact fit still succeeds.
func TestCapacityExhaustion(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		allowed string
		denied  string
	}{
		{"driver exact fit", []string{"--api", "driver", "--step", "256MiB", "--count", "5"}, "4", "1"},
		{"driver one byte over", []string{"--api", "driver", "--step", "1073741825", "--count", "1"}, "0", "1"},
		{"runtime", []string{"--step", "512MiB", "--count", "3"}, "2", "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "1GiB")
			r := n.run(nil, "target_app", tc.args...).ok(t)
			s := r.one(t, "summary")
			if s["allowed"] != tc.allowed || s["denied"] != tc.denied {
				t.Fatalf("summary %v: want allowed=%s denied=%s", s, tc.allowed, tc.denied)
			}
			for _, ev := range r.all("alloc") {
				if ev["status"] == "denied" && ev["error"] != "CUDA_ERROR_OUT_OF_MEMORY" && ev["error"] != "cudaErrorMemoryAllocation" {
					t.Errorf("denied allocation reports %v", ev)
				}
			}
		})
	}
}

// cuMemAlloc takes on the device what NVIDIA's driver takes (an H100,
// driver 580): a size above 1 MiB a multiple of 2 MiB, a smaller one
// exactly, through the driver API and the runtime alike. The device's
// free memory and NVML's figure for the process count what was taken;
// FAKECUDA_ALLOC_GRANULE=0 takes the sizes asked.
func TestAllocTakesWhatTheDriverTakes(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		args  []string
		taken int64 // by each allocation
	}{
		{"3 MiB", nil, []string{"--api", "driver", "--step", "3MiB"}, 4 * MiB},
		{"2 MiB + 4 KiB, runtime", nil, []string{"--step", "2101248"}, 4 * MiB},
		{"64 KiB", nil, []string{"--api", "driver", "--step", "64KiB"}, 64 << 10},
		{"1 MiB", nil, []string{"--api", "driver", "--step", "1MiB"}, MiB},
		{"1 MiB + 4 KiB", nil, []string{"--api", "driver", "--step", "1052672"}, 2 * MiB},
		{"3 MiB, granule off", []string{"FAKECUDA_ALLOC_GRANULE=0"}, []string{"--api", "driver", "--step", "3MiB"}, 3 * MiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "1GiB")
			r := n.run(tc.env, "target_app", append(tc.args, "--count", "20000", "--until-denied")...).ok(t)
			fits := GiB / tc.taken
			if s := r.one(t, "summary"); s.int(t, "allowed") != fits || s["denied"] != "1" {
				t.Errorf("filling 1 GiB: %v, want %d allowed, then one denied", s, fits)
			}
			for _, m := range r.all("meminfo") {
				if m["when"] == "held" && m.int(t, "free") != GiB-fits*tc.taken {
					t.Errorf("full: %v, want free=%d", m, GiB-fits*tc.taken)
				}
			}
			h := n.start(tc.env, "hold", "target_app", append(tc.args, "--count", "10", "--hold", "30")...)
			q := n.run(nil, "nvml_query").ok(t)
			if !hasProcess(q, strconv.Itoa(h.pid()), 10*tc.taken) {
				t.Errorf("NVML does not list the holder with %d bytes: %v", 10*tc.taken, q.all("process"))
			}
			if m := q.all("memory")[0]; m.int(t, "used") != 10*tc.taken {
				t.Errorf("NVML memory %v: want used=%d", m, 10*tc.taken)
			}
			if code := h.release(t); code != 0 {
				t.Errorf("holder exited %d: %v", code, h.lines)
			}
		})
	}
}

// Two processes on the same fake GPU compete for the same capacity, and what
// one frees (or leaves behind by exiting) is available to the next.
func TestCapacitySharedAcrossProcesses(t *testing.T) {
	n := newNode(t, "1GiB")
	holder := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "600MiB", "--count", "1", "--hold", "30")

	r := n.run(nil, "target_app", "--step", "600MiB", "--count", "1").ok(t)
	if before := r.all("meminfo")[0]; before.int(t, "free") != 1*GiB-600*MiB {
		t.Errorf("second process sees %v: want free = 1 GiB - 600 MiB", before)
	}
	if s := r.one(t, "summary"); s["allowed"] != "0" || s["denied"] != "1" {
		t.Errorf("second process: %v, want its 600 MiB denied while the first holds 600 MiB", s)
	}
	r = n.run(nil, "target_app", "--step", "400MiB", "--count", "1").ok(t)
	if s := r.one(t, "summary"); s["allowed"] != "1" {
		t.Errorf("what remains (424 MiB) should fit 400 MiB: %v", s)
	}

	holder.cmd.Process.Signal(syscall.SIGTERM) // exits through the default action: no cleanup code runs
	holder.wait(t)
	r = n.run(nil, "target_app", "--step", "1GiB", "--count", "1").ok(t)
	if s := r.one(t, "summary"); s["allowed"] != "1" {
		t.Errorf("after the holder died the whole device should be free: %v", s)
	}
}

// A SIGKILLed process's fake device memory is returned to the node: NVML stops
// listing it and its capacity can be allocated again.
func TestKilledProcessMemoryIsReturned(t *testing.T) {
	n := newNode(t, "1GiB")
	victim := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "768MiB", "--count", "1", "--hold", "60")
	pid := strconv.Itoa(victim.pid())

	q := n.run(nil, "nvml_query").ok(t)
	if !hasProcess(q, pid, 768*MiB) {
		t.Fatalf("NVML does not list pid %s with 768 MiB: %v", pid, q.all("process"))
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.wait(t)

	q = n.run(nil, "nvml_query").ok(t)
	if hasProcess(q, pid, -1) {
		t.Errorf("NVML still lists the killed pid %s", pid)
	}
	if m := q.all("memory")[0]; m["used"] != "0" {
		t.Errorf("memory after the kill %v: want used=0", m)
	}
	r := n.run(nil, "target_app", "--api", "driver", "--step", "1GiB", "--count", "1").ok(t)
	if s := r.one(t, "summary"); s["allowed"] != "1" {
		t.Errorf("the killed process's memory was not returned: %v", s)
	}
}

// The reclaim also happens without NVML: an allocation that does not fit
// sweeps dead processes before it is denied.
func TestKilledProcessReclaimedByAllocation(t *testing.T) {
	n := newNode(t, "1GiB")
	victim := n.start(nil, "hold", "target_app", "--api", "driver", "--step", "1GiB", "--count", "1", "--hold", "60")
	victim.cmd.Process.Kill()
	victim.wait(t)
	r := n.run(nil, "target_app", "--api", "driver", "--step", "1GiB", "--count", "1").ok(t)
	if s := r.one(t, "summary"); s["allowed"] != "1" {
		t.Errorf("allocation after the kill: %v", s)
	}
}

// A process whose CUDA was initialised on a thread that has exited is
// alive: NVML lists it with its memory, the memory is not free, and it is
// reclaimed only when the process dies. (fakecuda ties a process's slot to
// a lock held by that thread; the kernel marks the lock when the thread
// exits, and only then is the process itself checked.)
func TestProcessOutlivesItsCUDAThread(t *testing.T) {
	n := newNode(t, "1GiB")
	p := n.start(nil, "alloc", "fc_thread_init", "768MiB")
	ev := p.lines[len(p.lines)-1]
	if ev["result"] != "0" {
		t.Fatalf("allocation on the thread: %v", ev)
	}
	pid := ev["pid"]
	for i := 0; i < 2; i++ { // a listing sweeps; the second sees what the first left
		q := n.run(nil, "nvml_query").ok(t)
		if !hasProcess(q, pid, 768*MiB) {
			t.Fatalf("listing %d: NVML does not list pid %s with 768 MiB: %v", i+1, pid, q.all("process"))
		}
	}
	r := n.run(nil, "target_app", "--api", "driver", "--step", "512MiB", "--count", "1").ok(t)
	if s := r.one(t, "summary"); s["allowed"] != "0" || s["denied"] != "1" {
		t.Fatalf("512 MiB more on a 1 GiB device with 768 MiB held: %v (the live process's memory was reclaimed)", s)
	}
	p.cmd.Process.Kill()
	p.wait(t)
	q := n.run(nil, "nvml_query").ok(t)
	if hasProcess(q, pid, -1) {
		t.Errorf("NVML still lists the killed pid %s", pid)
	}
	if m := q.all("memory")[0]; m["used"] != "0" {
		t.Errorf("memory after the kill %v: want used=0", m)
	}
}

func hasProcess(r result, pid string, used int64) bool {
	for _, p := range r.all("process") {
		if p["pid"] == pid && (used < 0 || p["used"] == strconv.FormatInt(used, 10)) {
			return true
		}
	}
	return false
}

// CUDA_VISIBLE_DEVICES selects and renumbers devices by index, UUID or UUID
// prefix; an invalid entry ends the list; NVML ignores it.
func TestVisibleDevices(t *testing.T) {
	n := newNode(t, "1GiB,2GiB,3GiB")
	all := n.run(nil, "fc_probe").ok(t).all("device")
	if len(all) != 3 {
		t.Fatalf("devices without CUDA_VISIBLE_DEVICES: %v", all)
	}
	uuid := func(i int) string { return all[i]["uuid"] }
	for i, d := range all {
		if d.int(t, "total") != int64(i+1)*GiB {
			t.Fatalf("device %d: %v", i, d)
		}
	}
	if uuid(0) == uuid(1) || uuid(1) == uuid(2) || uuid(0)[:12] == uuid(1)[:12] {
		t.Fatalf("UUIDs are not distinct early enough: %v", all)
	}
	tests := []struct {
		name string
		cvd  string
		want []int // physical indices in visible order; nil = no device
	}{
		{"indices reordered", "2,0", []int{2, 0}},
		{"single index", "1", []int{1}},
		{"invalid index truncates", "1,7,0", []int{1}},
		{"invalid first entry hides all", "5,0", nil},
		{"duplicate truncates", "0,0,1", []int{0}},
		{"empty", "", nil},
		{"full uuid", uuid(2), []int{2}},
		{"uuid prefix and index", uuid(1)[:12] + ",0", []int{1, 0}},
		{"lowercase gpu prefix", strings.ToLower(uuid(0)[:4]) + uuid(0)[4:10], []int{0}},
		{"unknown uuid", "GPU-00000000-0000", nil},
		{"garbage", "foo", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := n.run([]string{"CUDA_VISIBLE_DEVICES=" + tc.cvd}, "fc_probe").ok(t)
			init := r.one(t, "init")
			if tc.want == nil {
				if init["result"] != "100" {
					t.Fatalf("init %v: want CUDA_ERROR_NO_DEVICE (100)", init)
				}
				return
			}
			got := r.all("device")
			if init["result"] != "0" || len(got) != len(tc.want) {
				t.Fatalf("CUDA_VISIBLE_DEVICES=%q: got %v, want physical %v", tc.cvd, got, tc.want)
			}
			for i, phys := range tc.want {
				if got[i]["uuid"] != uuid(phys) || got[i]["pci"] != all[phys]["pci"] || got[i]["total"] != all[phys]["total"] {
					t.Errorf("ordinal %d = %v, want physical %d %v", i, got[i], phys, all[phys])
				}
			}
		})
	}

	t.Run("allocation charges the physical device", func(t *testing.T) {
		p := n.start([]string{"CUDA_VISIBLE_DEVICES=2"}, "hold", "fc_probe", "--alloc", "0:1GiB", "--hold", "30")
		q := n.run([]string{"CUDA_VISIBLE_DEVICES=2"}, "nvml_query").ok(t)
		if q.one(t, "system")["devices"] != "3" {
			t.Errorf("NVML honoured CUDA_VISIBLE_DEVICES: %v", q.one(t, "system"))
		}
		mem := q.all("memory")
		if mem[2].int(t, "used") != GiB || mem[0]["used"] != "0" {
			t.Errorf("memory %v: want 1 GiB used on physical device 2 only", mem)
		}
		pid := strconv.Itoa(p.pid())
		for _, pr := range q.all("process") {
			if pr["pid"] == pid && pr["index"] != "2" {
				t.Errorf("process listed on device %s: %v", pr["index"], pr)
			}
		}
		if !hasProcess(q, pid, GiB) {
			t.Errorf("process %s not listed with 1 GiB: %v", pid, q.all("process"))
		}
	})
}

// FAKECUDA_DEVICES: accepted forms, and a malformed value makes cuInit fail
// with CUDA_ERROR_INVALID_VALUE and one line on stderr saying what is accepted.
func TestDevicesSetting(t *testing.T) {
	good := []struct {
		value string
		want  []int64
	}{
		{"", []int64{80 * GiB}},
		{"80GiB", []int64{80 * GiB}},
		{"2x80GiB", []int64{80 * GiB, 80 * GiB}},
		{"80GiB,40GiB", []int64{80 * GiB, 40 * GiB}},
		{"3x1G, 512MiB", []int64{GiB, GiB, GiB, 512 * MiB}},
		{"1048576", []int64{MiB}},
	}
	for _, tc := range good {
		t.Run("good "+tc.value, func(t *testing.T) {
			n := newNode(t, tc.value)
			r := n.run(nil, "fc_probe").ok(t)
			devs := r.all("device")
			if len(devs) != len(tc.want) {
				t.Fatalf("devices %v, want %v", devs, tc.want)
			}
			for i, d := range devs {
				if d.int(t, "total") != tc.want[i] {
					t.Errorf("device %d: %v, want total %d", i, d, tc.want[i])
				}
			}
			if r.stderr != "" {
				t.Errorf("unexpected stderr %q", r.stderr)
			}
		})
	}
	bad := []string{"abc", "80XB", "0GiB", "2x", "x80GiB", "17x1GiB", "80GiB,,40GiB", "-1GiB", "80 GiB", "1.5GiB", "9x1G,9x1G"}
	for _, value := range bad {
		t.Run("bad "+value, func(t *testing.T) {
			n := newNode(t, value)
			r := n.run(nil, "fc_probe").ok(t)
			if init := r.one(t, "init"); init["result"] != "1" {
				t.Errorf("init %v: want CUDA_ERROR_INVALID_VALUE (1)", init)
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "FAKECUDA_DEVICES") || !strings.Contains(lines[0], "2x80GiB") {
				t.Errorf("stderr %q: want one line naming FAKECUDA_DEVICES and the accepted forms", r.stderr)
			}
			// the runtime reports the failure instead of crashing
			tr := n.run(nil, "target_app")
			if tr.code != 1 || len(tr.all("error")) != 1 {
				t.Errorf("target_app with a bad FAKECUDA_DEVICES: exit %d, %q", tr.code, tr.stdout)
			}
		})
	}
}

// Copies, memsets, 2D/3D copies, arrays, virtual-memory mappings, the
// per-thread entry points and the runtime all move real bytes.
func TestCopiesAreReal(t *testing.T) {
	n := newNode(t, "1GiB")
	r := n.run(nil, "fc_copy").ok(t)
	s := r.one(t, "summary")
	if s["failed"] != "0" || s.int(t, "checks") != 13 {
		t.Fatalf("summary %v", s)
	}
	for _, c := range r.all("check") {
		if c["status"] != "ok" {
			t.Errorf("check %v", c)
		}
	}
}

// Contexts (primary and created, per-thread current, push/pop, destruction
// freeing memory but not pool memory, pointers of a destroyed context
// unknown), streams, events, modules and launches.
func TestContextsStreamsEvents(t *testing.T) {
	n := newNode(t, "1GiB,2GiB")
	r := n.run(nil, "fc_ctx").ok(t)
	s := r.one(t, "summary")
	if s["failed"] != "0" || s.int(t, "checks") != 39 {
		t.Fatalf("summary %v", s)
	}
	for _, c := range r.all("check") {
		if c["status"] != "ok" {
			t.Errorf("check %v", c)
		}
	}
}
