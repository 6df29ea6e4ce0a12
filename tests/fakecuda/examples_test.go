package fakecuda

import (
	"debug/elf"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Every example runs on fakecuda as designed: denials are reported, not crashes.
func TestExamples(t *testing.T) {
	tests := []struct {
		name    string
		devices string
		prog    string
		args    []string
		check   func(t *testing.T, r result)
	}{
		{"target_app runtime", "1GiB", "target_app", []string{"--step", "256MiB", "--count", "6"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["allowed"] != "4" || s["denied"] != "2" {
				t.Errorf("summary %v: want allowed=4 denied=2", s)
			}
			for _, ev := range r.all("alloc")[4:] {
				if ev["status"] != "denied" || ev["error"] != "cudaErrorMemoryAllocation" {
					t.Errorf("alloc %v: want denied with cudaErrorMemoryAllocation", ev)
				}
			}
			if held := r.all("meminfo")[1]; held["free"] != "0" {
				t.Errorf("meminfo while holding the whole device: %v", held)
			}
		}},
		{"target_app driver", "1GiB", "target_app", []string{"--api", "driver", "--step", "300MiB", "--count", "5", "--until-denied"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["allowed"] != "3" || s["denied"] != "1" {
				t.Errorf("summary %v: want allowed=3 denied=1 (stops at the first denial)", s)
			}
			if ev := r.all("alloc")[3]; ev["error"] != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Errorf("denied alloc %v: want CUDA_ERROR_OUT_OF_MEMORY", ev)
			}
			after := r.all("meminfo")[2]
			if after["free"] != after["total"] {
				t.Errorf("after freeing everything: %v", after)
			}
		}},
		{"caching_allocator", "4GiB", "caching_allocator", []string{"--iters", "300"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["requests"] != "300" || s["reserved"] != "0" || s["denied"] != "0" {
				t.Errorf("summary %v", s)
			}
			if s.int(t, "cache_hits") == 0 || s.int(t, "cuda_malloc") == 0 {
				t.Errorf("summary %v: want both cache hits and cudaMalloc calls", s)
			}
		}},
		{"caching_allocator under pressure", "200MiB", "caching_allocator", []string{"--iters", "300", "--live", "2"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s.int(t, "oom_retries") == 0 || len(r.all("oom")) == 0 {
				t.Errorf("summary %v: want the cache emptied on out-of-memory at least once", s)
			}
			if s["reserved"] != "0" {
				t.Errorf("summary %v", s)
			}
		}},
		{"xla_prealloc", "4GiB", "xla_prealloc", nil, func(t *testing.T, r result) {
			p := r.one(t, "prealloc")
			if p["status"] != "allowed" || p.int(t, "bytes") != 3*GiB {
				t.Errorf("prealloc %v: want 3 GiB (75%% of 4 GiB) allowed", p)
			}
			var held event
			for _, ev := range r.all("meminfo") {
				if ev["when"] == "held" {
					held = ev
				}
			}
			if held == nil || held.int(t, "free") != GiB {
				t.Errorf("meminfo while held %v: want 1 GiB free", held)
			}
		}},
		{"expandable_segments", "100MiB", "expandable_segments", []string{"--step", "20MiB", "--count", "8"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["chunks"] != "5" || s["denied"] != "1" || s.int(t, "mapped") != 100*MiB {
				t.Errorf("summary %v: want 5 chunks of 20 MiB then one denial", s)
			}
			if g := r.one(t, "granularity"); g.int(t, "bytes") != 2*MiB {
				t.Errorf("granularity %v", g)
			}
		}},
		{"alloc_storm driver", "8GiB", "alloc_storm", []string{"--threads", "4", "--iters", "2000"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["ok"] != "8000" || s["denied"] != "0" || s["errors"] != "0" {
				t.Errorf("summary %v", s)
			}
			if m := r.one(t, "meminfo"); m["free"] != m["total"] {
				t.Errorf("after the storm %v: concurrent charges and releases do not balance", m)
			}
		}},
		// 10 live blocks of 8 MiB exceed 64 MiB, so every thread meets denials
		// even when the scheduler runs the threads one after another.
		{"alloc_storm runtime with denials", "64MiB", "alloc_storm", []string{"--api", "runtime", "--threads", "4", "--iters", "500", "--size", "8MiB", "--hold", "10"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s.int(t, "ok") == 0 || s.int(t, "denied") == 0 || s["errors"] != "0" || s.int(t, "ok")+s.int(t, "denied") != 2000 {
				t.Errorf("summary %v: want both allowed and denied allocations, no errors", s)
			}
			if m := r.one(t, "meminfo"); m["free"] != m["total"] {
				t.Errorf("after the storm %v: concurrent charges and releases do not balance", m)
			}
		}},
		{"static_runtime", "1GiB", "static_runtime", []string{"--step", "300MiB", "--count", "4"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["allowed"] != "3" || s["denied"] != "1" {
				t.Errorf("summary %v", s)
			}
			if c := r.one(t, "copy"); c["status"] != "ok" {
				t.Errorf("copy %v", c)
			}
			if st := r.one(t, "start"); st["runtime_version"] != "12060" || st["driver_version"] != "12060" {
				t.Errorf("start %v", st)
			}
		}},
		{"dlopen_driver", "1GiB", "dlopen_driver", []string{"--size", "256MiB", "--count", "5"}, func(t *testing.T, r result) {
			if res := r.one(t, "resolve"); res["missing"] != "0" {
				t.Errorf("resolve %v: %v", res, r.all("missing"))
			}
			if s := r.one(t, "summary"); s["allowed"] != "4" || s["denied"] != "1" {
				t.Errorf("summary %v", s)
			}
		}},
		{"async_pool", "256MiB", "async_pool", []string{"--size", "64MiB", "--count", "3"}, func(t *testing.T, r result) {
			s := r.one(t, "summary")
			if s["allowed"] != "4" || s["denied"] != "2" {
				t.Errorf("summary %v: want 3 default-pool + 1 created-pool allocations allowed, 2 denied", s)
			}
			for _, p := range r.all("pool") {
				want := map[string]int64{"default": 192 * MiB, "created": 64 * MiB}[p["which"]]
				if p.int(t, "used") != want {
					t.Errorf("pool %v: want used=%d", p, want)
				}
			}
		}},
		{"nvml_query", "80GiB,40GiB", "nvml_query", nil, func(t *testing.T, r result) {
			sys := r.one(t, "system")
			if sys["devices"] != "2" || sys["cuda_version"] != "12060" {
				t.Errorf("system %v", sys)
			}
			mem := r.all("memory")
			if len(mem) != 2 || mem[0].int(t, "total") != 80*GiB || mem[1].int(t, "total") != 40*GiB {
				t.Errorf("memory %v", mem)
			}
			for _, d := range r.all("device") {
				if !strings.HasPrefix(d["uuid"], "GPU-") || len(d["uuid"]) != 40 {
					t.Errorf("device %v: malformed UUID", d)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.devices)
			r := n.run(nil, tc.prog, tc.args...).ok(t)
			tc.check(t, r)
		})
	}
}

// static_runtime carries the runtime inside: no libcudart.so and no libcuda.so
// among its needed libraries (the runtime dlopens libcuda.so.1).
func TestStaticRuntimeLinkage(t *testing.T) {
	n := newNode(t, "")
	f, err := elf.Open(n.program("static_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libcudart") || strings.HasPrefix(l, "libcuda.") {
			t.Errorf("static_runtime needs %s", l)
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range syms {
		if s.Name == "cudaMalloc" && s.Section != elf.SHN_UNDEF {
			found = true
		}
	}
	if !found {
		t.Error("static_runtime does not define cudaMalloc itself")
	}
}

// alloc_bench prints exactly one JSON line with the documented fields.
func TestAllocBenchOutput(t *testing.T) {
	for _, api := range []string{"driver", "runtime"} {
		t.Run(api, func(t *testing.T) {
			n := newNode(t, "")
			r := n.run(nil, "alloc_bench", "--threads", "2", "--iters", "2000", "--size", "1MiB", "--api", api).ok(t)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 1 {
				t.Fatalf("want one line, got %q", r.stdout)
			}
			var v struct {
				Threads    *int     `json:"threads"`
				Pairs      *int     `json:"pairs"`
				NsPerPair  *float64 `json:"ns_per_pair_median"`
				PairsPerSc *float64 `json:"pairs_per_sec"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &v); err != nil {
				t.Fatalf("%q: %v", lines[0], err)
			}
			if v.Threads == nil || *v.Threads != 2 || v.Pairs == nil || *v.Pairs != 4000 || v.NsPerPair == nil ||
				*v.NsPerPair <= 0 || v.PairsPerSc == nil || *v.PairsPerSc <= 0 {
				t.Errorf("bench line %q", lines[0])
			}
		})
	}
	// --ms: threads run batches of 1000 until the time is up; the rate
	// comes from the window where all ran, so it is at most what every
	// pair over the whole run would give.
	t.Run("ms", func(t *testing.T) {
		n := newNode(t, "")
		start := time.Now()
		r := n.run(nil, "alloc_bench", "--threads", "3", "--ms", "200", "--size", "1MiB").ok(t)
		took := time.Since(start)
		var v allocLine
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &v); err != nil {
			t.Fatalf("%q: %v", r.stdout, err)
		}
		if v.Threads != 3 || v.Pairs <= 0 || v.Pairs%1000 != 0 || v.PairsPerSec <= 0 ||
			v.PairsPerSec > float64(v.Pairs)/took.Seconds()*1.5+1 {
			t.Errorf("bench line %q after %v", r.stdout, took)
		}
		if took < 200*time.Millisecond {
			t.Errorf("a 200 ms run ended after %v", took)
		}
	})
}

// --paired: one line with both medians and their difference; only one
// thread on the driver API.
func TestAllocBenchPaired(t *testing.T) {
	n := newNode(t, "")
	r := n.run(nil, "alloc_bench", "--paired", "--iters", "4000", "--size", "1MiB").ok(t)
	var v struct {
		Pairs  *int64   `json:"pairs"`
		Linked *float64 `json:"ns_per_pair_linked"`
		Driver *float64 `json:"ns_per_pair_driver"`
		Added  *float64 `json:"ns_added_paired"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &v); err != nil {
		t.Fatalf("%q: %v", r.stdout, err)
	}
	if v.Pairs == nil || *v.Pairs != 4000 || v.Linked == nil || *v.Linked <= 0 || v.Driver == nil || *v.Driver <= 0 || v.Added == nil {
		t.Errorf("paired line %q", r.stdout)
	}
	if r := n.run(nil, "alloc_bench", "--paired", "--threads", "2", "--iters", "4000"); r.code != 2 {
		t.Errorf("--paired --threads 2: exit %d, want 2 (%s)", r.code, r.stderr)
	}
}

type allocLine struct {
	Threads     int     `json:"threads"`
	Pairs       int64   `json:"pairs"`
	PairsPerSec float64 `json:"pairs_per_sec"`
}
