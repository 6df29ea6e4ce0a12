package slurm

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// --gpu-compute and --gpu-compute-max under real Slurm: checked at submit
// (srun and sbatch refuse a value outside 1-100 before a job exists, and a
// weight above what the site allows: with the shipped settings, the
// quota's fraction of the largest GPU the job may get, 4 GiB of 40 GiB in
// partition gpu), and what a job asked for is its session's GPU time
// share on the node, through the plugin, the Prolog and gpusliced. A job
// that asks none gets the site's default: its quota's fraction of the GPU.
func TestComputeShareOptions(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	for _, bad := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"srun", "--gpu-mem=4G", "--gpu-compute=150", "true"}, "expected a percent of the GPU from 1 to 100"},
		{[]string{"sbatch", "--gpu-mem=4G", "--gpu-compute-max=0", "--wrap", "true"}, "expected a percent of the GPU from 1 to 100"},
		{[]string{"srun", "--gpu-mem=4G", "--gpu-compute=100", "true"},
			"gpuslice: --gpu-compute=100 is more than this cluster allows: at most 10% (the job's quota's share of the GPU: 4GiB of 40GiB, the largest GPU in partition gpu)"},
		{[]string{"sbatch", "--gpu-mem=4G", "--gpu-compute=11", "--wrap", "true"},
			"gpuslice: --gpu-compute=11 is more than this cluster allows: at most 10%"},
		{[]string{"salloc", "--gpu-mem=4G", "--gpu-compute=100", "true"}, "gpuslice: --gpu-compute=100 is more than this cluster allows"},
	} {
		r := run(ctxFor(t, time.Minute), c.cmd(u, bad.cmd[0], bad.cmd[1:]...))
		if r.code != 1 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%v: %s; want refused at submit (exit 1), saying %q", bad.cmd, r, bad.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want *api.Compute
	}{
		{[]string{"--gpu-compute=5"}, &api.Compute{Mode: api.ComputePercent, Percent: 5}},
		{[]string{"--gpu-compute=10", "--gpu-compute-max=50"}, &api.Compute{Mode: api.ComputePercent, Percent: 10, MaxPercent: 50}},
		{nil, &api.Compute{Mode: api.ComputeProportional}},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			id := c.sbatch(t, u, "compute", "#!/bin/sh\nsleep 30\n", append([]string{"--gpu-mem=4G"}, tc.args...)...)
			var got *api.Compute
			if err := waitFor(60*time.Second, func() error {
				out, _ := c.cmd(nil, "squeue", "-h", "-j", id, "-t", "R", "-o", "%N").Output()
				n := c.nodeByName(strings.TrimSpace(string(out)))
				if n == nil {
					return fmt.Errorf("job %s not running yet", id)
				}
				s, err := n.session(id)
				if err != nil {
					return err
				}
				got = s.Compute
				if !reflect.DeepEqual(got, tc.want) {
					return errors.New("not the share asked for")
				}
				return nil
			}); err != nil {
				t.Errorf("job %s's session share %+v, want %+v (%v)", id, got, tc.want, err)
			}
			_ = c.cmd(nil, "scancel", id).Run()
			c.assertReleased(t, id)
		})
	}
}
