package compute

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// job_submit.lua refuses a malformed --gpu-compute / --gpu-compute-max at
// submit, and a share above what the site allows (by default the job's
// quota's fraction of the GPU): its pure checks and slurm_job_submit
// itself, run with the Lua slurmctld links against a slurm.conf with one
// 80 GiB GPU and a gpusliced.yaml that sets a ceiling.
func TestJobSubmitChecksCompute(t *testing.T) {
	lua, err := exec.LookPath("lua5.1")
	if err != nil {
		t.Skip("lua5.1 is not installed")
	}
	root := testenv.RepoRoot(t)
	dir := t.TempDir()
	conf, yaml := filepath.Join(dir, "slurm.conf"), filepath.Join(dir, "gpusliced.yaml")
	if err := os.WriteFile(conf, []byte("NodeName=g1 Gres=gpu:1,shard:81920\nPartitionName=gpu Nodes=g1 Default=YES\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(yaml, []byte("log_level: info\ncompute_cap: 50 # every job's ceiling\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lua, filepath.Join(root, "tests", "compute", "lua", "job_submit_compute_test.lua"),
		filepath.Join(root, "etc", "slurm", "job_submit.lua"))
	cmd.Env = append(os.Environ(), "SLURM_CONF="+conf, "GPUSLICE_CONFIG="+yaml)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
