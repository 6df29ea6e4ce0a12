package core

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// gpaProbe runs gs_probe's steps on device 0 in a fresh session of 1 GiB
// (env added to the process's environment): its result, and what its slot
// charged once the steps were done (attached: whether it had a slot).
func gpaProbe(t *testing.T, env []string, steps ...string) (r probe.Result, used []uint64, attached bool) {
	t.Helper()
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	l := openLedger(t, d, sess.ID)
	args := append(append([]string{"dev:0"}, steps...), "pid", "pause")
	p := probe.Start(t, sessionEnv(t, d, sess.ID, env...), probe.Bin(t, "gs_probe"), args...)
	pid := int(p.Expect("pid").Int(t, "pid"))
	p.Expect("paused")
	used, attached = slotOf(t, l, pid)
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	noStderr(t, "probe", p.Stderr())
	return p.Result(), used, attached
}

// cuGetProcAddress: the current version resolves to the hook (charged),
// the per-thread flag to the per-thread hook, the legacy version passes
// through, and a lookup of cuGetProcAddress itself returns the hook.
func TestGetProcAddressPaths(t *testing.T) {
	r, used, ok := gpaProbe(t, nil,
		"gpa:cuMemAlloc:12000:0", "gpa:cuMemAlloc:12000:2", "gpa:cuMemAlloc:3020:0", "gpa:cuMemAlloc:2000:0",
		"gpa:cuMemAllocAsync:12000:0", "gpa:cuMemAllocAsync:12000:2", "gpa:cuMemFreeAsync:12000:2",
		"gpa:cuGetProcAddress:12000:0", "gpa:cuGetProcAddress:11030:0", "gpa4:cuMemAlloc:12000:0",
		"gpa:cuInit:12000:0",
		"gpakeep:12000:0:300M", "gpakeep:12000:2:300M", "gpakeep:12000:0:500M")
	want := []string{
		"libgpuslice.so:cuMemAlloc_v2", "libgpuslice.so:cuMemAlloc_v2", "libgpuslice.so:cuMemAlloc_v2",
		"libcuda.so.1:cuMemAlloc",
		"libgpuslice.so:cuMemAllocAsync", "libgpuslice.so:cuMemAllocAsync_ptsz", "libgpuslice.so:cuMemFreeAsync_ptsz",
		"libgpuslice.so:cuGetProcAddress_v2", "libgpuslice.so:cuGetProcAddress",
	}
	gpa := r.All("gpa")
	for i, w := range want {
		if gpa[i].Get("rc") != "0" || gpa[i].Get("at") != w {
			t.Errorf("%s: want at=%s", gpa[i].Line, w)
		}
	}
	if g := r.Find(t, "gpa4", 0); g.Get("at") != "libgpuslice.so:cuMemAlloc_v2" {
		t.Errorf("%s: want the hook through the 4-argument cuGetProcAddress", g.Line)
	}
	if g := gpa[len(gpa)-1]; !strings.HasPrefix(g.Get("at"), "libcuda.so.1:") {
		t.Errorf("%s: an unhooked entry point must stay the driver's", g.Line)
	}
	keeps := r.All("gpakeep")
	for i, w := range []string{"0", "0", "2"} {
		if keeps[i].Get("alloc") != w {
			t.Errorf("%s: want alloc=%s", keeps[i].Line, w)
		}
	}
	if !ok || used[0] != 600*MiB {
		t.Errorf("slot charges %v (attached %v), want 600 MiB through the resolved pointers", used, ok)
	}
}

// A driver whose cuGetProcAddress answers with private entry points
// (FAKECUDA_PROCADDR=private: none is an exported symbol) at 13000, the
// version a CUDA 13 runtime asks at: what those answers allocate is charged
// and refused past the quota, as through exported ones.
func TestGetProcAddressPrivateEntryPoints(t *testing.T) {
	r, used, ok := gpaProbe(t, []string{"FAKECUDA_PROCADDR=private"},
		"gpa:cuMemAlloc:13000:0", "gpa:cuMemAllocAsync:13000:2", "gpa:cuGraphInstantiate:13000:0",
		"gpa:cuMemAlloc:2000:0",
		"gpakeep:13000:0:300M", "gpa4keep:13000:2:300M", "gpaasync:13000:2:100M", "gpakeep:13000:0:500M")
	gpa := r.All("gpa")
	for i, w := range []string{"libgpuslice.so:cuMemAlloc_v2", "libgpuslice.so:cuMemAllocAsync_ptsz",
		"libgpuslice.so:cuGraphInstantiateWithFlags"} {
		if gpa[i].Get("rc") != "0" || gpa[i].Get("at") != w {
			t.Errorf("%s: want at=%s", gpa[i].Line, w)
		}
	}
	if g := gpa[3]; g.Get("rc") != "0" || !strings.HasPrefix(g.Get("at"), "libcuda.so.1:") {
		t.Errorf("%s: the legacy entry point must stay the driver's", g.Line)
	}
	keeps := append(r.All("gpakeep"), r.All("gpa4keep")...)
	for i, w := range []string{"0", "2", "0"} {
		if keeps[i].Get("alloc") != w {
			t.Errorf("%s: want alloc=%s", keeps[i].Line, w)
		}
	}
	if a := r.Find(t, "gpaasync", 0); a.Get("alloc") != "0" {
		t.Errorf("%s: want alloc=0", a.Line)
	}
	if !ok || used[0] != 700*MiB {
		t.Errorf("slot charges %v (attached %v), want 700 MiB through the private entry points", used, ok)
	}
}
