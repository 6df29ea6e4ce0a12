package containers

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// pyxis, built against this machine's Slurm (22.05) headers, loads into
// Slurm's srun beside gpuslice's plugin: srun offers both
// --container-image and --gpu-mem, and accepts the two together up to
// asking the controller for an allocation (there is none: what a job on
// a cluster does with them is not run here).
func TestPyxisLoadsBesideGpuslice(t *testing.T) {
	dir := runtimeDir(t, "pyxis")
	plugin := filepath.Join(dir, "lib", "slurm", "spank_pyxis.so")
	gpuslice := testenv.Artifact(t, "spank/gpuslice.so")
	if _, err := exec.LookPath("srun"); err != nil {
		t.Fatalf("srun: %v (make deps installs slurm-client)", err)
	}
	conf := t.TempDir()
	writeFile(t, filepath.Join(conf, "plugstack.conf"),
		"required "+gpuslice+"\nrequired "+plugin+"\n", 0o644)
	// A controller that is not there: srun reads its plugins before it
	// asks for an allocation.
	writeFile(t, filepath.Join(conf, "slurm.conf"), `ClusterName=gscontainers
SlurmctldHost=localhost
SlurmctldPort=9
MessageTimeout=1
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=p Nodes=localhost Default=YES
PlugStackConfig=`+filepath.Join(conf, "plugstack.conf")+"\n", 0o644)
	srun := func(args ...string) string {
		t.Helper()
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(c, "srun", args...)
		cmd.Env = append(testenv.BaseEnv(), "SLURM_CONF="+filepath.Join(conf, "slurm.conf"))
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	help := srun("--help")
	for _, opt := range []string{"--container-image=", "--gpu-mem="} {
		if !strings.Contains(help, opt) {
			t.Errorf("srun --help does not offer %s with pyxis and gpuslice in plugstack.conf:\n%s", opt, help)
		}
	}
	out := srun("--container-image=/nonexistent.sqsh", "--gpu-mem=1G", "true")
	if !strings.Contains(out, "Unable to contact slurm controller") {
		t.Errorf("srun --container-image --gpu-mem did not get as far as the controller:\n%s", out)
	}
}
