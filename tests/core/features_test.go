package core

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Two processes that see different physical GPUs as ordinal 0 are charged
// to the right GPU, each under that GPU's quota.
func TestVisibleDevicesChargeThePhysicalGPU(t *testing.T) {
	d, gpus := twoGPUNode(t)
	quota := map[string]uint64{gpus[0].UUID: 512 * MiB, gpus[1].UUID: 1 * GiB}
	sess := newSession(t, d, client.SessionRequest{Quotas: quota})
	l := openLedger(t, d, sess.ID)
	for i, g := range gpus {
		t.Run("CUDA_VISIBLE_DEVICES="+strconv.Itoa(g.Index), func(t *testing.T) {
			p := probe.Start(t, sessionEnv(t, d, sess.ID, "CUDA_VISIBLE_DEVICES="+strconv.Itoa(g.Index)),
				probe.Bin(t, "gs_probe"), "dev:0", "uuid:0", "meminfo", "fill:64M", "pid", "pause", "freeall")
			pid := int(p.Expect("pid").Int(t, "pid"))
			p.Expect("paused")
			used, ok := slotOf(t, l, pid)
			p.Send("")
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			r := p.Result()
			if u := r.Find(t, "uuid", 0).Get("uuid"); u != g.UUID {
				t.Fatalf("ordinal 0 is %s, want %s", u, g.UUID)
			}
			if mi := r.Find(t, "meminfo", 0); mi.Uint(t, "total") != quota[g.UUID] || mi.Uint(t, "free") != quota[g.UUID] {
				t.Errorf("meminfo %s, want total=free=%d", mi.Line, quota[g.UUID])
			}
			fill := r.Find(t, "fill", 0)
			if fill.Uint(t, "bytes") != quota[g.UUID] || fill.Get("rc") != "2" {
				t.Errorf("fill: %s, want %d bytes then rc=2", fill.Line, quota[g.UUID])
			}
			if !ok {
				t.Fatalf("no slot for pid %d", pid)
			}
			mine := gpuIndex(t, l, g.UUID)
			other := gpuIndex(t, l, gpus[1-i].UUID)
			if used[mine] != quota[g.UUID] || used[other] != 0 {
				t.Errorf("slot charges %v; want %d on ledger GPU %d and 0 on %d", used, quota[g.UUID], mine, other)
			}
		})
	}
}

// A visible GPU that is not part of the session: nothing can be allocated
// on it, one line says so, and queries show 0.
func TestGPUOutsideSessionDenied(t *testing.T) {
	d, gpus := twoGPUNode(t)
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB, GPUs: []string{gpus[0].UUID}})
	r := probe.Run(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:1", "alloc:1M", "alloc:1M", "meminfo", "totalmem:1", "dev:0", "alloc:1M")
	if r.Err != nil {
		t.Fatalf("probe: %v\n%s", r.Err, r.Stderr)
	}
	for i := 0; i < 2; i++ {
		if a := r.Find(t, "alloc", i); a.Get("rc") != "2" {
			t.Errorf("alloc on the GPU outside the session: %s", a.Line)
		}
	}
	if a := r.Find(t, "alloc", 2); a.Get("rc") != "0" {
		t.Errorf("alloc on the session's GPU: %s", a.Line)
	}
	if mi := r.Find(t, "meminfo", 0); mi.Get("free") != "0" || mi.Get("total") != "0" {
		t.Errorf("meminfo on the GPU outside the session: %s", mi.Line)
	}
	if tm := r.Find(t, "totalmem", 0); tm.Get("bytes") != "0" {
		t.Errorf("totalmem: %s", tm.Line)
	}
	lines := r.StderrLines()
	if len(lines) != 1 || !strings.Contains(lines[0], gpus[1].UUID) || !strings.Contains(lines[0], "not part of session") {
		t.Errorf("stderr: %q", r.Stderr)
	}
}

// A forked child attaches as a process of its own: its allocations are
// charged to its slot, the parent's stay in the parent's.
func TestForkChildChargedToItsOwnSlot(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 4 * GiB})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:1G", "pid", "fork", "dev:0", "alloc:256M", "pid", "pause", "endfork", "pause")
	parent := int(p.Expect("pid").Int(t, "pid"))
	child := int(p.Expect("pid").Int(t, "pid"))
	p.Expect("paused")
	if parent == child {
		t.Fatal("no child")
	}
	pu, ok1 := slotOf(t, l, parent)
	cu, ok2 := slotOf(t, l, child)
	if !ok1 || !ok2 {
		t.Fatalf("slots: parent %v child %v\n%s", ok1, ok2, p.Output())
	}
	if pu[0] != 1*GiB || cu[0] != 256*MiB {
		t.Errorf("parent slot %d (want 1 GiB), child slot %d (want 256 MiB)", pu[0], cu[0])
	}
	if l.Used(0) != GiB+256*MiB {
		t.Errorf("used %d, want %d", l.Used(0), GiB+256*MiB)
	}
	p.Send("") // the child exits holding its 256 MiB: the daemon reclaims them
	if f := p.Expect("forked"); f.Get("exit") != "0" {
		t.Errorf("child: %s", f.Line)
	}
	p.Expect("paused")
	probe.Eventually(t, 30*time.Second, "child's bytes reclaimed", func() (bool, string) {
		return l.Used(0) == GiB, strconv.FormatUint(l.Used(0), 10)
	})
	if pu, _ := slotOf(t, l, parent); pu[0] != GiB {
		t.Errorf("parent slot %d after the child exited", pu[0])
	}
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	noStderr(t, "probe", p.Stderr())
}

// A process linked against the driver sends its ATTACH from the library's
// constructor and reads the answer at its first CUDA call. A child forked
// before that call never takes the parent's answer: each is charged in a
// slot of its own, which names its own pid.
func TestForkBeforeFirstCallAttachesOnItsOwn(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 4 * GiB})
	l := openLedger(t, d, sess.ID)
	// cuInit (which gs_probe calls first) is not hooked: the fork comes
	// before the first hooked call.
	cmd := exec.Command(probe.Bin(t, "gs_probe"),
		"pid", "fork", "dev:0", "alloc:256M", "pid", "pause", "endfork", "dev:0", "alloc:1G", "pause")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := probe.StartCmd(t, cmd, sessionEnv(t, d, sess.ID))
	// the child holds the probe's stdout: on failure both must go
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	parent := int(p.Expect("pid").Int(t, "pid"))
	// Before any CUDA call the parent already holds a slot (its early
	// ATTACH was answered), with nothing charged.
	probe.Eventually(t, 30*time.Second, "the parent's early attach", func() (bool, string) {
		u, ok := slotOf(t, l, parent)
		return ok && u[0] == 0, fmt.Sprint(ok, u)
	})
	child := int(p.Expect("pid").Int(t, "pid"))
	p.Expect("paused")
	cu, ok := slotOf(t, l, child)
	if !ok || cu[0] != 256*MiB {
		t.Fatalf("child %d: slot found %v, holding %v; want its own slot with 256 MiB\n%s", child, ok, cu, p.Output())
	}
	if pu, _ := slotOf(t, l, parent); pu[0] != 0 {
		t.Errorf("the parent's slot holds %d while only the child allocated", pu[0])
	}
	p.Send("")
	if f := p.Expect("forked"); f.Get("exit") != "0" {
		t.Errorf("child: %s", f.Line)
	}
	p.Expect("paused")
	if pu, ok := slotOf(t, l, parent); !ok || pu[0] != GiB {
		t.Errorf("parent: slot found %v, holding %v; want 1 GiB", ok, pu)
	}
	probe.Eventually(t, 30*time.Second, "child's bytes reclaimed", func() (bool, string) {
		return l.Used(0) == GiB, strconv.FormatUint(l.Used(0), 10)
	})
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	noStderr(t, "probe", p.Stderr())
}

// PATCH of the quota applies to a running process at once.
func TestPatchQuotaAppliesLive(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:768M", "alloc:512M", "meminfo", "pause", "alloc:512M", "meminfo", "pause", "alloc:512M")
	p.Expect("paused")
	up := 2 * GiB
	if _, err := d.Client().PatchSession(ctx(t), sess.ID, client.PatchRequest{QuotaBytes: &up}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	p.Send("")
	p.Expect("paused")
	down := 512 * MiB
	if _, err := d.Client().PatchSession(ctx(t), sess.ID, client.PatchRequest{QuotaBytes: &down}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	noStderr(t, "probe", p.Stderr())
	r := p.Result()
	want := []string{"0", "2", "0", "2"}
	for i, w := range want {
		if a := r.Find(t, "alloc", i); a.Get("rc") != w {
			t.Errorf("alloc #%d: %s, want rc=%s", i, a.Line, w)
		}
	}
	if mi := r.Find(t, "meminfo", 0); mi.Uint(t, "total") != GiB || mi.Uint(t, "free") != 256*MiB {
		t.Errorf("before the patch: %s", mi.Line)
	}
	if mi := r.Find(t, "meminfo", 1); mi.Uint(t, "total") != 2*GiB || mi.Uint(t, "free") != 2*GiB-1280*MiB {
		t.Errorf("after the patch: %s", mi.Line)
	}
}

// NVML inside a session reports the quota; the GPU outside it shows 0.
func TestNVMLReportsQuota(t *testing.T) {
	d, gpus := twoGPUNode(t)
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: 8 * GiB, GPUs: []string{gpus[1].UUID}})
	r := probe.Run(t, sessionEnv(t, d, sess.ID, "CUDA_VISIBLE_DEVICES=1"), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:1G", "nvml")
	if r.Err != nil {
		t.Fatalf("probe: %v\n%s", r.Err, r.Stderr)
	}
	noStderr(t, "probe", r.Stderr)
	for _, s := range r.All("nvmldev") {
		in := s.Get("uuid") == gpus[1].UUID
		wantTotal, wantUsed := uint64(0), uint64(0)
		if in {
			wantTotal, wantUsed = 8*GiB, GiB
		}
		for _, v := range []string{"1", "2"} {
			if s.Get("rc"+v) != "0" || s.Uint(t, "total"+v) != wantTotal || s.Uint(t, "used"+v) != wantUsed ||
				s.Uint(t, "free"+v) != wantTotal-wantUsed {
				t.Errorf("nvml v%s of %s: %s; want total %d used %d", v, s.Get("uuid"), s.Line, wantTotal, wantUsed)
			}
		}
	}
	if n := len(r.All("nvmldev")); n != 2 {
		t.Errorf("%d NVML devices, want 2", n)
	}
}

// The attach-time measurement program works under a session (the bench
// harness runs it; this only checks it runs and admits the allocation).
func TestAttachBenchRuns(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	r := probe.Run(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "attach_bench"))
	if r.Err != nil || !strings.HasPrefix(r.Stdout, "attach_us=") || r.Find(t, "", 0).Get("rc") != "0" {
		t.Fatalf("attach_bench: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
}

// With GPUSLICE_IPC_TOKEN_REQUIRED on the daemon, the interceptor sends
// GPUSLICE_IPC_TOKEN: the right one attaches, a wrong or missing one fails
// closed with the daemon's reason.
func TestIPCToken(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Token: "tok-123"})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	tests := []struct {
		name  string
		extra []string
		rc    string
	}{
		{"right token", []string{"GPUSLICE_IPC_TOKEN=tok-123"}, "0"},
		{"wrong token", []string{"GPUSLICE_IPC_TOKEN=tok-124"}, "2"},
		{"no token", nil, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := probe.Run(t, sessionEnv(t, d, sess.ID, tc.extra...), probe.Bin(t, "gs_probe"), "dev:0", "alloc:1M")
			if a := r.Find(t, "alloc", 0); a.Get("rc") != tc.rc {
				t.Errorf("%s, want rc=%s\n%s", a.Line, tc.rc, r.Stderr)
			}
			if tc.rc == "0" {
				noStderr(t, "probe", r.Stderr)
				return
			}
			lines := r.StderrLines()
			if len(lines) != 1 || !strings.Contains(lines[0], "token") {
				t.Errorf("stderr: %q", r.Stderr)
			}
		})
	}
}

// GPUSLICE_DEBUG=1 explains the attach and the device mapping on stderr.
func TestDebugLines(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	r := probe.Run(t, sessionEnv(t, d, sess.ID, "GPUSLICE_DEBUG=1"), probe.Bin(t, "gs_probe"), "dev:0", "alloc:1M")
	if a := r.Find(t, "alloc", 0); a.Get("rc") != "0" {
		t.Fatalf("%s\n%s", a.Line, r.Stderr)
	}
	for _, want := range []string{"gpuslice: attached to session '" + sess.ID + "' at " + d.IPCSock + ": slot ",
		"gpuslice: device 0 is " + sess.GPUs[0].UUID + ", ledger GPU 0"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	for _, l := range r.StderrLines() {
		if !strings.HasPrefix(l, "gpuslice: ") {
			t.Errorf("stderr line without the prefix: %q", l)
		}
	}
}

// A process that failed closed (daemon down for longer than the attach
// window) is admitted again by a later allocation once the daemon is back:
// re-attach is tried at most once per second from the allocation path.
func TestReattachAfterDaemonReturns(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	d.Kill()
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:2M", "pause", "sleep:1100", "alloc:2M", "alloc:2M", "meminfo")
	p.Expect("paused")
	d.Restart()
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	r := p.Result()
	for i, want := range []string{"2", "0", "0"} {
		if a := r.Find(t, "alloc", i); a.Get("rc") != want {
			t.Errorf("alloc #%d: %s, want rc=%s", i, a.Line, want)
		}
	}
	if mi := r.Find(t, "meminfo", 0); mi.Uint(t, "total") != GiB || mi.Uint(t, "free") != GiB-4*MiB {
		t.Errorf("meminfo after re-attach: %s", mi.Line)
	}
	lines := r.StderrLines()
	if len(lines) != 2 || !strings.Contains(lines[0], "cannot attach") ||
		!strings.Contains(lines[1], "admitted again") {
		t.Errorf("stderr:\n%s", r.Stderr)
	}
}

// A program that closes every descriptor at start (some launchers do)
// closes the socket of its early ATTACH, and may open a file under that
// number: the library never reads or closes that file, and attaches at
// the first CUDA call as without the early ATTACH.
func TestProgramClosingItsDescriptorsKeepsItsFiles(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	r := probe.Run(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"),
		"reopen", "dev:0", "alloc:64M", "meminfo", "reopened")
	if r.Err != nil {
		t.Fatalf("probe: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	if rc := r.Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Errorf("alloc rc=%s, want 0\n%s%s", rc, r.Stdout, r.Stderr)
	}
	if total := r.Find(t, "meminfo", 0).Get("total"); total != strconv.FormatUint(GiB, 10) {
		t.Errorf("not attached: meminfo total=%s\n%s", total, r.Stdout)
	}
	if ok := r.Find(t, "reopened", 0).Get("ok"); ok != "1" {
		t.Errorf("the program's own file (fd %s) was closed by the library\n%s%s", r.Find(t, "reopen", 0).Get("fd"), r.Stdout, r.Stderr)
	}
}
