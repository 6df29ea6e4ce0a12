package nvidia

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

const slurmNVMLPluginDir = "usr/lib/x86_64-linux-gnu/slurm-wlm"

// slurmdConf writes a private slurm.conf and gres.conf (AutoDetect=nvml) for
// this host into dir. PluginDir lists Debian's plugin directory, then the
// unpacked slurm-wlm-nvml-plugin's (which holds gpu_nvml.so).
func slurmdConf(t *testing.T, dir, pluginDir string, gpus int) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	for _, d := range []string{"spool", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`ClusterName=nvtools
SlurmctldHost=%[1]s
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm:%[2]s
GresTypes=gpu
SlurmdSpoolDir=%[3]s/spool
StateSaveLocation=%[3]s/state
SlurmdPidFile=%[3]s/slurmd.pid
SlurmdLogFile=%[3]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
NodeName=%[1]s Gres=gpu:%[4]d CPUs=%[5]d State=UNKNOWN
PartitionName=p Nodes=%[1]s Default=YES
`, host, pluginDir, dir, gpus, runtime.NumCPU())
	path := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gres.conf"), []byte("AutoDetect=nvml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Debian's slurmd, with Slurm's own gpu/nvml plugin (slurm-wlm-nvml-plugin),
// detects fakecuda's GPUs through fakecuda's NVML: `slurmd -G` prints one
// GRES line per device with its /dev/nvidiaN file and its CPU affinity.
func TestSlurmdAutoDetectNVML(t *testing.T) {
	root := toolsRoot(t)
	pluginDir := filepath.Join(root, slurmNVMLPluginDir)
	toolsFile(t, root, filepath.Join(slurmNVMLPluginDir, "gpu_nvml.so"))
	slurmd, err := exec.LookPath("slurmd")
	if err != nil {
		t.Fatalf("slurmd is not installed (mk/deps.mk installs it): %v", err)
	}
	row := &toolsRow{Program: "slurmd -G, AutoDetect=nvml (Slurm 22.05 gpu/nvml plugin)"}
	defer toolsRecord(t, row)

	row.Runs = t.Run("detect", func(t *testing.T) {
		n := newToolsNode(t, "2x16GiB")
		conf := slurmdConf(t, t.TempDir(), pluginDir, 2)
		// slurmd closes every descriptor above 2 at start: the loader logs to stderr
		r := toolsExecLog(t, n.env("SLURM_CONF="+conf), false, slurmd, "-G").ok(t)
		lib := filepath.Join(n.build, "lib")
		toolsLoaded(t, r, lib, filepath.Join(lib, "libnvidia-ml.so.1"), filepath.Join(pluginDir, "gpu_nvml.so"))
		out := r.stdout + r.stderr
		if strings.Contains(out, "fatal") {
			t.Errorf("slurmd -G: fatal error:\n%s", out)
		}
		cores := "0"
		if runtime.NumCPU() > 1 {
			cores = fmt.Sprintf("0-%d", runtime.NumCPU()-1)
		}
		if !strings.Contains(out, "gpu/nvml: _get_system_gpu_list_nvml: 2 GPU system device(s) detected") {
			t.Errorf("slurmd -G: the gpu/nvml plugin did not detect 2 GPUs:\n%s", out)
		}
		for i := 0; i < 2; i++ {
			re := regexp.MustCompile(fmt.Sprintf(`Gres Name=gpu Type=\S+ Count=1 Index=%d ID=\d+ File=/dev/nvidia%d Cores=%s `,
				i, i, regexp.QuoteMeta(cores)))
			if !re.MatchString(out) {
				t.Errorf("slurmd -G: no GRES line for GPU %d (Cores=%s):\n%s", i, cores, out)
			}
		}
	})
	row.Note = "the gpu/nvml plugin detects both fakecuda GPUs (device files, CPU affinity); " +
		"slurmd holds no GPU memory, so no quota applies"
}
