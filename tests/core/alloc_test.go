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
// charged exactly, given back when released.
func TestAllocationKindsEnforced(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 256 * MiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	tests := []struct {
		name string
		fits string // an allocation of about 200 MiB
		over string // then one that does not fit
	}{
		{"cuMemAlloc_v2", "alloc:200M", "alloc:100M"},
		{"cuMemAllocManaged", "managed:200M", "managed:100M"},
		{"cuMemAllocPitch_v2", "pitch:200000:1000", "pitch:100000:1000"},
		{"cuMemAllocAsync", "async:200M", "async:100M"},
		{"cuMemAllocAsync_ptsz", "asyncptsz:200M", "asyncptsz:100M"},
		{"cuMemAllocFromPoolAsync", "pool:200M", "pool:100M"},
		{"cuMemAllocFromPoolAsync_ptsz", "poolptsz:200M", "poolptsz:100M"},
		{"cuMemCreate", "vmm:200M", "vmm:100M"},
		{"cuArrayCreate_v2", "array:51200:1024", "array:25600:1024"},
		{"cuArray3DCreate_v2", "array3d:1024:1024:50", "array3d:1024:1024:25"},
		{"cuMipmappedArrayCreate", "mipmap:6400:6400:3", "mipmap:4096:4096:1"},
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
			if want := fit.Uint(t, "bytes"); used[0] != want {
				t.Errorf("charged %d bytes, the allocation is %d", used[0], want)
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
