package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestComputeGauges(t *testing.T) {
	m := New(testGPUs)
	c := m.ComputeGauges()
	c.Pass(0, 2, 1)
	c.Pass(len(testGPUs), 9, 9) // not a GPU of the node: ignored
	problems, err := testutil.GatherAndLint(m.Registry, "gpuslice_compute_active_sessions", "gpuslice_compute_held_sessions")
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	want := `
# HELP gpuslice_compute_held_sessions Sessions held at the launch gate on the GPU after the last pass (ahead of their share or at their cap).
# TYPE gpuslice_compute_held_sessions gauge
gpuslice_compute_held_sessions{gpu="0",uuid="` + testGPUs[0].UUID + `"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_compute_held_sessions"); err != nil {
		t.Error(err)
	}
}

// Each freeze counts once; the gauge follows freezes and thaws.
func TestComputeFreezeMetrics(t *testing.T) {
	m := New(testGPUs)
	c := m.ComputeGauges()
	c.Frozen("a", "/cg/a/task_0", true)
	c.Frozen("a", "/cg/a/task_1", true)
	c.Frozen("a", "/cg/a/task_0", false)
	problems, err := testutil.GatherAndLint(m.Registry, "gpuslice_compute_freezes_total", "gpuslice_compute_frozen_cgroups")
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	want := `
# HELP gpuslice_compute_freezes_total Cgroups of sessions frozen because they kept using the GPU while held at their share (the gate bypassed).
# TYPE gpuslice_compute_freezes_total counter
gpuslice_compute_freezes_total 2
# HELP gpuslice_compute_frozen_cgroups Cgroups of sessions frozen now by the compute share.
# TYPE gpuslice_compute_frozen_cgroups gauge
gpuslice_compute_frozen_cgroups 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_compute_freezes_total", "gpuslice_compute_frozen_cgroups"); err != nil {
		t.Error(err)
	}
}
