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
// (srun and sbatch refuse a value outside 1-100 before a job exists), and
// what a job asked for is its session's GPU time share on the node, through
// the plugin, the Prolog and gpusliced. A job without them has no share
// (the cluster's plugstack.conf sets no compute= default).
func TestComputeShareOptions(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	for _, bad := range [][]string{{"srun", "--gpu-mem=1G", "--gpu-compute=150", "true"},
		{"sbatch", "--gpu-mem=1G", "--gpu-compute-max=0", "--wrap", "true"}} {
		r := run(ctxFor(t, time.Minute), c.cmd(u, bad[0], bad[1:]...))
		if r.code == 0 || !strings.Contains(r.stderr, "expected a percent of the GPU from 1 to 100") {
			t.Errorf("%v: %s; want refused at submit, saying what is accepted", bad, r)
		}
	}
	for _, tc := range []struct {
		args []string
		want *api.Compute
	}{
		{[]string{"--gpu-compute=30"}, &api.Compute{Mode: api.ComputePercent, Percent: 30}},
		{[]string{"--gpu-compute=40", "--gpu-compute-max=50"}, &api.Compute{Mode: api.ComputePercent, Percent: 40, MaxPercent: 50}},
		{nil, nil},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			id := c.sbatch(t, u, "compute", "#!/bin/sh\nsleep 30\n", append([]string{"--gpu-mem=1G"}, tc.args...)...)
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
