package slurm

// Slurm's own GPU memory figure beside gpuslice's (docs/monitoring.md,
// "Slurm's gres/gpumem beside gpuslice's peak"): on a Slurm with the
// gpu/nvml plugin (Debian 13's slurm-wlm-nvml-plugin in the root of the
// 24.11 run, SchedMD's releases built here), AccountingStorageTRES=gres/gpu
// makes slurmstepd sample each task's GPU memory through NVML (fakecuda's,
// as a node has the driver's) and record its largest in TRESUsageInMax as
// gres/gpumem.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nvmlPlugins are where Slurm's gpu/nvml plugin lives in the
// distributions' packages, and in a release built from source (make
// slurm-src) under the build directory.
func nvmlPlugins(build string) []string {
	if slurm.tree != "" {
		return []string{filepath.Join(build, slurm.tree, "lib", "slurm", "gpu_nvml.so")}
	}
	return []string{
		"/usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so",
		"/usr/lib64/slurm/gpu_nvml.so",
	}
}

// nvmlAccounting: this run's Slurm has gpu/nvml, and the cluster gathers
// GPU memory with it (prepareNVMLAccounting).
var nvmlAccounting bool

// gatherInterval is JobAcctGatherFrequency's task interval here.
const gatherInterval = time.Second

// prepareNVMLAccounting turns on Slurm's sampling of tasks
// (jobacct_gather/linux, every gatherInterval) where Slurm has gpu/nvml,
// and gives slurmd and its slurmstepds fakecuda's NVML and the node's
// fake GPU state: slurmd takes them from this process's environment.
func (c *cluster) prepareNVMLAccounting() {
	for _, p := range nvmlPlugins(c.build) {
		if _, err := os.Stat(p); err == nil {
			nvmlAccounting = true
		}
	}
	if !nvmlAccounting {
		return
	}
	for i, l := range c.opts.Accounting {
		if strings.HasPrefix(l, "JobAcctGatherType=") {
			c.opts.Accounting[i] = "JobAcctGatherType=jobacct_gather/linux"
		}
	}
	c.opts.Accounting = append(c.opts.Accounting,
		fmt.Sprintf("JobAcctGatherFrequency=task=%d", int(gatherInterval/time.Second)))
	for _, kv := range c.fakeEnv { // LD_LIBRARY_PATH (fakecuda's libnvidia-ml.so.1), FAKECUDA_*
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
}

// gresAutoDetect makes slurmd load gpu/nvml (Slurm loads a GPU plugin for
// AutoDetect only); the GPUs gres.conf names by File= stay as they are,
// and those NVML finds at /dev/nvidiaN are ignored ("config-only GPUs").
// Call after writeSlurmConfig, before slurmd starts.
func (c *cluster) gresAutoDetect() error {
	if !nvmlAccounting {
		return nil
	}
	b, err := os.ReadFile(c.path("gres.conf"))
	if err != nil {
		return err
	}
	return writeFile(c.path("gres.conf"), "AutoDetect=nvml\n"+string(b), 0o644)
}

// stepTRES returns the step's TRESUsageInMax and TRESUsageInTot as
// sacct records them (bytes, --noconvert), once it has them.
func (c *cluster) stepTRES(t *testing.T, step string) (max, tot map[string]uint64) {
	t.Helper()
	parse := func(s string) map[string]uint64 {
		m := map[string]uint64{}
		for _, kv := range strings.Split(s, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				m[k] = n
			}
		}
		return m
	}
	err := waitFor(60*time.Second, func() error {
		out, err := c.cmd(nil, "sacct", "-n", "-P", "--noconvert", "-j", step, "-o", "JobID,TRESUsageInMax,TRESUsageInTot").CombinedOutput()
		if err != nil {
			return fmt.Errorf("sacct: %v: %s", err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(l, "|")
			if len(f) == 3 && f[0] == step && strings.Contains(f[1], "gres/gpumem=") {
				max, tot = parse(f[1]), parse(f[2])
				return nil
			}
		}
		return fmt.Errorf("step %s: no gres/gpumem in sacct: %q", step, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	return max, tot
}

// Slurm's gres/gpumem of a step against gpuslice's peak of the job, on one
// node and GPU:
//   - one task holding 900 MiB for several gather intervals: Slurm's
//     largest sample is the peak, to the byte;
//   - one task that allocates 900 MiB and exits within a gather interval:
//     Slurm may see none of it (its figure is never above gpuslice's);
//   - two tasks holding 300 and 600 MiB: Slurm's TRESUsageInMax is the
//     larger task's (600 MiB), TRESUsageInTot their sum (900 MiB), which
//     is gpuslice's peak of the job on that GPU.
func TestSlurmGPUMemBesidePeak(t *testing.T) {
	c := needAccounting(t)
	if slurm.name < "23.02" {
		t.Skipf("Slurm %s records no gres/gpumem (23.02 on)", slurm.name)
	}
	if !nvmlAccounting {
		t.Skipf("Slurm %s here has no gpu/nvml plugin (%s)", slurm.name, strings.Join(nvmlPlugins(c.build), ", "))
	}
	u := c.users["gsltest1"]
	const MiB = 1 << 20
	hold := strconv.Itoa(int(8 * gatherInterval / time.Second))
	for _, tc := range []struct {
		name     string
		srun     []string
		peak     uint64 // gpuslice's peak of the job on its GPU
		max, tot uint64 // Slurm's, 0: at most the peak
	}{
		{"held", []string{"-n1", c.bin("target_app"), "--step", "300M", "--count", "3", "--hold", hold}, 900 * MiB, 900 * MiB, 900 * MiB},
		{"brief", []string{"-n1", c.bin("target_app"), "--step", "300M", "--count", "3"}, 900 * MiB, 0, 0},
		{"two tasks", []string{"-n2", "sh", "-c", `exec ` + c.bin("target_app") + ` --step 300M --count $((SLURM_PROCID + 1)) --hold ` + hold},
			900 * MiB, 600 * MiB, 900 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(ctxFor(t, 2*time.Minute), c.cmd(u, "srun", append([]string{"-v", "-w", "tn2", "--gpu-mem=1G"}, tc.srun...)...))
			if r.code != 0 {
				t.Fatalf("srun: %s", r)
			}
			id := jobID(t, r)
			c.waitJobEnd(t, id, 2*time.Minute)
			rep := c.jobNode(t, id).history(t, id)
			if len(rep.GPUs) != 1 || rep.GPUs[0].PeakBytes != tc.peak {
				t.Fatalf("gpuslice's report of job %s: %+v, want one GPU with peak %d MiB", id, rep, tc.peak/MiB)
			}
			max, tot := c.stepTRES(t, id+".0")
			t.Logf("job %s: gpuslice peak %d MiB; Slurm TRESUsageInMax gres/gpumem %d MiB, TRESUsageInTot %d MiB",
				id, tc.peak/MiB, max["gres/gpumem"]/MiB, tot["gres/gpumem"]/MiB)
			if max["gres/gpumem"] > tc.peak || tot["gres/gpumem"] > tc.peak {
				t.Errorf("Slurm's gres/gpumem (max %d, tot %d) above gpuslice's peak %d", max["gres/gpumem"], tot["gres/gpumem"], tc.peak)
			}
			if tc.max != 0 && (max["gres/gpumem"] != tc.max || tot["gres/gpumem"] != tc.tot) {
				t.Errorf("Slurm's gres/gpumem: TRESUsageInMax %d, TRESUsageInTot %d; want %d and %d",
					max["gres/gpumem"], tot["gres/gpumem"], tc.max, tc.tot)
			}
		})
	}
}
