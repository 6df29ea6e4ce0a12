package security

// Helpers of the interceptor's regression tests (prefixed nat: other files
// of this package have their own helpers).

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

const natMiB = uint64(1) << 20

var natSeq atomic.Int64

// natTwoGPUNode starts gpusliced on a fake node with two 80 GiB GPUs.
func natTwoGPUNode(t *testing.T) (*testenv.Daemon, []client.GPU) {
	t.Helper()
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gpus, err := d.Client().GPUs(c)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs: %v %+v", err, gpus)
	}
	return d, gpus
}

// natSession creates a session and maps its ledger (limits read-only).
func natSession(t *testing.T, d *testenv.Daemon, req client.SessionRequest) (*client.Session, *ledger.Ledger) {
	t.Helper()
	if req.ID == "" {
		req.ID = fmt.Sprintf("nat%d-%d", os.Getpid(), natSeq.Add(1))
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.Client().CreateSession(c, req)
	if err != nil {
		t.Fatalf("create session %+v: %v", req, err)
	}
	limPath, ctrPath := ledger.Paths(d.LedgerDir, s.ID)
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
	return s, l
}

// natEnv is the environment of a process in session id, interceptor preloaded.
func natEnv(t *testing.T, d *testenv.Daemon, id string, extra ...string) []string {
	t.Helper()
	env := append(d.Env(), "LD_PRELOAD="+probe.Lib(t), "GPUSLICE_SESSION="+id)
	return append(env, extra...)
}

// natRunProbe runs gs_probe with steps in session id and fails on a crash.
func natRunProbe(t *testing.T, d *testenv.Daemon, id string, steps ...string) probe.Result {
	t.Helper()
	r := probe.Run(t, natEnv(t, d, id), probe.Bin(t, "gs_probe"), steps...)
	if r.Err != nil {
		t.Fatalf("gs_probe %v: %v\n%s\n%s", steps, r.Err, r.Stdout, r.Stderr)
	}
	return r
}

// natGPUIndex is the ledger index of the GPU with uuid.
func natGPUIndex(t *testing.T, l *ledger.Ledger, uuid string) int {
	t.Helper()
	for g := 0; g < l.NGPUs(); g++ {
		if l.UUID(g) == uuid {
			return g
		}
	}
	t.Fatalf("GPU %s is not in the ledger", uuid)
	return -1
}
