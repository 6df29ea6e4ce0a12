// Package core runs real gpusliced, real processes with libgpuslice.so
// preloaded, and fakecuda together: what issue 3 requires end to end.
package core

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Every charged allocation kind: admitted under the quota, denied past it,
// charged what it takes on the GPU, given back when released.
func TestAllocationKindsEnforced(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 256 * MiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	tests := []struct {
		name    string
		fits    string // an allocation of about 200 MiB
		over    string // then one that does not fit
		charged uint64 // what fits takes on the GPU; 0: its bytes
	}{
		{"cuMemAlloc_v2", "alloc:200M", "alloc:100M", 0},
		{"cuMemAllocManaged", "managed:200M", "managed:100M", 0},
		// pitch 200192 x 1000 rows, rounded up to 2 MiB as the driver takes it
		{"cuMemAllocPitch_v2", "pitch:200000:1000", "pitch:100000:1000", 96 * 2 * MiB},
		{"cuMemAllocAsync", "async:200M", "async:100M", 0},
		{"cuMemAllocAsync_ptsz", "asyncptsz:200M", "asyncptsz:100M", 0},
		{"cuMemAllocFromPoolAsync", "pool:200M", "pool:100M", 0},
		{"cuMemAllocFromPoolAsync_ptsz", "poolptsz:200M", "poolptsz:100M", 0},
		{"cuMemCreate", "vmm:200M", "vmm:100M", 0},
		{"cuArrayCreate_v2", "array:51200:1024", "array:25600:1024", 0},
		{"cuArray3DCreate_v2", "array3d:1024:1024:50", "array3d:1024:1024:25", 0},
		{"cuMipmappedArrayCreate", "mipmap:6400:6400:3", "mipmap:4096:4096:1", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
				"dev:0", tc.fits, tc.over, "pid", "pause", "free", "sync", "pause") // a pool keeps a free until a synchronisation
			pid := int(p.Expect("pid").Int(t, "pid"))
			p.Expect("paused")
			used, ok := slotOf(t, l, pid)
			if !ok {
				t.Fatalf("no slot for pid %d:\n%s", pid, p.Output())
			}
			p.Send("")
			p.Expect("free")
			p.Expect("paused")
			after, _ := slotOf(t, l, pid)
			p.Send("")
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			r := p.Result()
			name, _, _ := strings.Cut(tc.fits, ":")
			fit := r.Find(t, name, 0)
			over := r.Find(t, name, 1)
			if fit.Get("rc") != "0" {
				t.Fatalf("%s: %s", tc.fits, fit.Line)
			}
			if over.Get("rc") != "2" {
				t.Errorf("%s past the quota: %s, want rc=2", tc.over, over.Line)
			}
			want := tc.charged
			if want == 0 {
				want = fit.Uint(t, "bytes")
			}
			if used[0] != want {
				t.Errorf("charged %d bytes, want %d (%s)", used[0], want, fit.Line)
			}
			if after[0] != 0 {
				t.Errorf("after the release and a synchronisation the slot holds %d bytes", after[0])
			}
		})
	}
	probe.Eventually(t, 30*time.Second, "used back to 0", func() (bool, string) {
		return l.Used(0) == 0, strconv.FormatUint(l.Used(0), 10)
	})
}

// The driver serves a cuMemAlloc above 1 MiB with a multiple of
// 2 MiB (a real H100: 3 MiB and 2 MiB + 4 KiB blocks took 4 MiB each by
// NVML's figure), and cuMemAllocPitch the same way; fakecuda does too.
// Each is charged what the driver takes, on the general path and on the
// common one (a thread's credit covering it), and its release gives that
// back. A job filling its quota with such blocks is refused at the quota
// by the driver's figure, and the audit (every 50 ms, policy kill) leaves
// it be.
func TestRoundedAllocationsWithinQuota(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--audit-interval", "50ms"}})
	const quota = GiB
	for _, tc := range []struct {
		name string
		size uint64
	}{
		{"3MiB", 3 * MiB},
		{"2MiB+4KiB", 2*MiB + 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
			l := openLedger(t, d, sess.ID)
			s := strconv.FormatUint(tc.size, 10)
			p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
				"dev:0", "pid",
				"alloc:"+s, "pause", "free", "pause", // the general path (the thread's first charge)
				"alloc:"+s, "pause", "free", "pause", // the common path: the credit the free left
				"pitch:"+s+":1", "pause", "free",
				"fill:"+s, "sleep:500", "pause", "freeall", "pause")
			pid := p.Expect("pid").Get("pid")
			// nvml is the driver's figure for the probe (NVML's process
			// list, read outside the session, as the audit reads it).
			nvml := func() uint64 {
				q := probe.Run(t, d.Env(), example(t, "nvml_query"))
				for _, pr := range q.All("process") {
					if pr.Get("pid") == pid {
						return pr.Uint(t, "used")
					}
				}
				t.Fatalf("NVML does not list the probe (pid %s):\n%s", pid, q.Stdout)
				return 0
			}
			checks := []struct {
				what    string
				charged uint64
			}{
				{"cuMemAlloc_v2 (general path)", 4 * MiB},
				{"its free", 0},
				{"cuMemAlloc_v2 (common path)", 4 * MiB},
				{"its free", 0},
				{"cuMemAllocPitch_v2", 4 * MiB},
				{"filled", quota},
				{"everything freed", 0},
			}
			for _, c := range checks {
				p.Expect("paused")
				used, _ := slotOf(t, l, int(p.Cmd.Process.Pid))
				if len(used) == 0 || used[0] != c.charged {
					t.Errorf("%s: the slot charges %v, want %d bytes", c.what, used, c.charged)
				}
				if c.charged != 0 {
					if n := nvml(); len(used) == 0 || n != used[0] || n > quota {
						t.Errorf("%s: NVML counts %d bytes for the process, charged %v, quota %d", c.what, n, used, quota)
					}
				}
				p.Send("")
			}
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v (stopped by the audit?)\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			r := p.Result()
			if f := r.Find(t, "fill", 0); f.Get("rc") != "2" || f.Uint(t, "n") != quota/(4*MiB) {
				t.Errorf("%s: want %d blocks, then CUDA_ERROR_OUT_OF_MEMORY (2)", f.Line, quota/(4*MiB))
			}
		})
	}
}
