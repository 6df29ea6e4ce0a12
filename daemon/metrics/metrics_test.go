package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var testGPUs = []gpu.GPU{
	{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", Name: "A", Physical: 80 << 30},
	{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", Name: "B", Physical: 40 << 30},
}

func setup(t *testing.T, debug bool) (*Metrics, *session.Manager) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ledgers := filepath.Join(dir, "ledgers")
	os.Mkdir(ledgers, 0o700)
	m := New(testGPUs)
	mgr, err := session.New(session.Options{LedgerDir: ledgers, Slots: 4, Overcommit: 1, DefaultTTL: 3600e9}, testGPUs, st, m.Events())
	if err != nil {
		t.Fatal(err)
	}
	go mgr.Watcher().Run()
	t.Cleanup(func() { mgr.Watcher().Close(); mgr.Close() })
	m.Attach(mgr, debug)
	return m, mgr
}

func TestLintAndValues(t *testing.T) {
	m, mgr := setup(t, false)
	if _, _, err := mgr.Create(api.SessionRequest{ID: "j1", UID: 0, QuotaBytes: 8 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mgr.Create(api.SessionRequest{ID: "j2", UID: 0, QuotaBytes: 80 << 30, GPUs: []string{"1"}}); err == nil {
		t.Fatal("admission let 80GiB onto a 40GiB GPU")
	}
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	a, err := mgr.Attach("j1", 0, uint32(child.Process.Pid), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The files own the attachment's fds from here (they close them).
	lim, ctr := ledger.FilesOf(a.Limits, a.Counters)
	defer lim.Close()
	defer ctr.Close()
	l, err := ledger.Map(lim, ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reserve(a.Slot, 0, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(a.Slot, 1, 9<<30); err == nil {
		t.Fatal("reserve past the limit succeeded")
	}
	m.ObserveIPC(ipc.TypePing, 1e-5)

	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP gpuslice_gpu_used_bytes Bytes charged in the ledgers of live sessions on the GPU.
# TYPE gpuslice_gpu_used_bytes gauge
gpuslice_gpu_used_bytes{gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"} 1.073741824e+09
gpuslice_gpu_used_bytes{gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"} 0
# HELP gpuslice_gpu_committed_bytes Sum of the quotas of live sessions on the GPU.
# TYPE gpuslice_gpu_committed_bytes gauge
gpuslice_gpu_committed_bytes{gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"} 8.589934592e+09
gpuslice_gpu_committed_bytes{gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"} 8.589934592e+09
# HELP gpuslice_allocation_denials_total Allocations refused by a session's quota on the GPU.
# TYPE gpuslice_allocation_denials_total counter
gpuslice_allocation_denials_total{gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"} 0
gpuslice_allocation_denials_total{gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"} 1
# HELP gpuslice_attached_processes Processes attached to a session.
# TYPE gpuslice_attached_processes gauge
gpuslice_attached_processes 1
# HELP gpuslice_sessions Live sessions.
# TYPE gpuslice_sessions gauge
gpuslice_sessions 1
# HELP gpuslice_admission_refusals_total Session creations or quota changes refused because the GPU's quota capacity was exhausted.
# TYPE gpuslice_admission_refusals_total counter
gpuslice_admission_refusals_total 1
`
	names := []string{"gpuslice_gpu_used_bytes", "gpuslice_gpu_committed_bytes", "gpuslice_allocation_denials_total",
		"gpuslice_attached_processes", "gpuslice_sessions", "gpuslice_admission_refusals_total"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// The process's death reclaims the held bytes; denials stay counted
	// after release.
	child.Process.Kill()
	child.Wait()
	mgr.Sweep()
	if _, err := mgr.Delete("j1"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.reclaimedBytes.WithLabelValues("0", testGPUs[0].UUID)); got != 1<<30 {
		t.Fatalf("reclaimed bytes %v", got)
	}
	if got := testutil.ToFloat64(m.reclaims); got != 1 {
		t.Fatalf("reclaims %v", got)
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP gpuslice_allocation_denials_total Allocations refused by a session's quota on the GPU.
# TYPE gpuslice_allocation_denials_total counter
gpuslice_allocation_denials_total{gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"} 0
gpuslice_allocation_denials_total{gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"} 1
`), "gpuslice_allocation_denials_total"); err != nil {
		t.Fatal(err)
	}
}

func TestNoSessionLabelUnlessDebug(t *testing.T) {
	for _, debug := range []bool{false, true} {
		name := "default"
		if debug {
			name = "debug"
		}
		t.Run(name, func(t *testing.T) {
			m, mgr := setup(t, debug)
			if _, _, err := mgr.Create(api.SessionRequest{ID: "job-7", UID: 0, QuotaBytes: 1 << 30}); err != nil {
				t.Fatal(err)
			}
			n, err := testutil.GatherAndCount(m.Registry, "gpuslice_session_limit_bytes", "gpuslice_session_used_bytes", "gpuslice_session_peak_bytes")
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if debug {
				want = 6 // 3 metrics x 2 GPUs
			}
			if n != want {
				t.Fatalf("%d per-session series, want %d", n, want)
			}
			problems, err := testutil.GatherAndLint(m.Registry)
			if err != nil || len(problems) > 0 {
				t.Fatalf("lint: %v %v", problems, err)
			}
			if _, err := mgr.Delete("job-7"); err != nil {
				t.Fatal(err)
			}
			n, _ = testutil.GatherAndCount(m.Registry, "gpuslice_session_limit_bytes", "gpuslice_session_used_bytes", "gpuslice_session_peak_bytes")
			if n != 0 {
				t.Fatalf("%d per-session series left after release", n)
			}
		})
	}
}
