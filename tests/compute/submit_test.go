package compute

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// job_submit.lua refuses a malformed --gpu-compute / --gpu-compute-max at
// submit (its pure check, run with the Lua slurmctld links).
func TestJobSubmitChecksCompute(t *testing.T) {
	lua, err := exec.LookPath("lua5.1")
	if err != nil {
		t.Skip("lua5.1 is not installed")
	}
	root := testenv.RepoRoot(t)
	out, err := exec.Command(lua, filepath.Join(root, "tests", "compute", "lua", "job_submit_compute_test.lua"),
		filepath.Join(root, "etc", "slurm", "job_submit.lua")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
