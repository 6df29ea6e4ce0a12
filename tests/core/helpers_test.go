package core

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

const (
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
)

var sessionSeq atomic.Int64

// ctx is a call's context (testenv.Context).
var ctx = testenv.Context

// newSession creates a root-owned session (or uid's) and returns its id.
func newSession(t *testing.T, d *testenv.Daemon, req client.SessionRequest) *client.Session {
	t.Helper()
	if req.ID == "" {
		req.ID = fmt.Sprintf("core%d-%d", os.Getpid(), sessionSeq.Add(1))
	}
	s, err := d.Client().CreateSession(ctx(t), req)
	if err != nil {
		t.Fatalf("create session %+v: %v", req, err)
	}
	return s
}

// openLedger maps the session's ledger files from the daemon's runtime
// directory (as root), the way a client maps them: limits read-only.
func openLedger(t *testing.T, d *testenv.Daemon, id string) *ledger.Ledger {
	t.Helper()
	limPath, ctrPath := ledger.Paths(d.LedgerDir, id)
	lim, err := os.Open(limPath)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	defer lim.Close()
	ctr, err := os.OpenFile(ctrPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	defer ctr.Close()
	l, err := ledger.Map(lim, ctr)
	if err != nil {
		t.Fatalf("map ledger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// gpuIndex is the ledger index of the GPU with uuid.
func gpuIndex(t *testing.T, l *ledger.Ledger, uuid string) int {
	t.Helper()
	for g := 0; g < l.NGPUs(); g++ {
		if l.UUID(g) == uuid {
			return g
		}
	}
	t.Fatalf("GPU %s is not in the ledger", uuid)
	return -1
}

// slotOf returns the used bytes per ledger GPU of the slot owned by pid.
func slotOf(t *testing.T, l *ledger.Ledger, pid int) ([]uint64, bool) {
	t.Helper()
	for _, s := range l.Attached() {
		if int(s.PID) == pid && s.State == ledger.SlotAttached {
			return s.Used, true
		}
	}
	return nil, false
}

// sumSlots adds up every attached slot's bytes on ledger GPU g.
func sumSlots(l *ledger.Ledger, g int) uint64 {
	var n uint64
	for _, s := range l.Attached() {
		n += s.Used[g]
	}
	return n
}

// sessionEnv is the environment of a process in session id, interceptor preloaded.
func sessionEnv(t *testing.T, d *testenv.Daemon, id string, extra ...string) []string {
	t.Helper()
	env := append(d.Env(), "LD_PRELOAD="+probe.Lib(t), "GPUSLICE_SESSION="+id)
	return append(env, extra...)
}

// example is the path of a fakecuda example program.
func example(t *testing.T, name string) string {
	t.Helper()
	return testenv.Artifact(t, filepath.Join("examples", name))
}

// refusalLineRe is the start of the line the interceptor writes when the
// quota refuses (docs/interceptor.md "When the quota refuses"): tests of
// enforcement are refused on purpose.
var refusalLineRe = regexp.MustCompile(`^gpuslice: (job|session) \S+: (an allocation|a CUDA context) of \S+ on GPU \S+ was refused: `)

// withoutRefusals is stderr less the interceptor's refusal lines.
func withoutRefusals(stderr string) string {
	var out []string
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if !refusalLineRe.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// noStderr fails when the process complained (beyond refusal lines).
func noStderr(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.TrimSpace(withoutRefusals(stderr)) != "" {
		t.Errorf("%s wrote to stderr:\n%s", what, stderr)
	}
}

// twoGPUNode starts gpusliced on a fake node with two 80 GiB GPUs and
// returns it with its GPU inventory.
func twoGPUNode(t *testing.T) (*testenv.Daemon, []client.GPU) {
	t.Helper()
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs: %v %+v", err, gpus)
	}
	return d, gpus
}

// holdFirstAlloc runs target_app in env until it holds one 2 MiB
// allocation (a whole granule: docs/charging.md), and
// returns it with whether it has NVML mapped.
func holdFirstAlloc(t *testing.T, env []string, dev int) (*probe.Proc, bool) {
	t.Helper()
	p := probe.Start(t, env, example(t, "target_app"), "--api", "driver", "--device", fmt.Sprint(dev),
		"--step", "2MiB", "--count", "1", "--hold", "30")
	p.Expect("hold")
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return p, strings.Contains(string(maps), "libnvidia-ml.so")
}

func release(t *testing.T, p *probe.Proc) {
	t.Helper()
	p.Cmd.Process.Signal(syscall.SIGUSR1)
	if err := p.Wait(); err != nil {
		t.Fatalf("target_app: %v\n%s", err, p.Output())
	}
}
