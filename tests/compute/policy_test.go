package compute

import (
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The GPU-time weight of a Slurm job is the site's to set: the Prolog
// passes on what the job asked (--gpu-compute and --gpu-compute-max, from
// the job's own environment), and gpusliced gives it what its policy
// (gpusliced.yaml compute_*) allows. By default a job's weight is its
// quota's fraction of the GPU (8 GiB of 80: 10 %); it may ask for less,
// and a request above the policy is lowered to it and logged, never a
// failed Prolog (which would drain the node). The real Prolog and the
// real gpusliced, one fake 80 GiB GPU.
func TestPrologShareFollowsSitePolicy(t *testing.T) {
	prop := &api.Compute{Mode: api.ComputeProportional}
	for _, site := range []struct {
		flags []string // gpusliced's flags: the site's policy
		cases []struct {
			share, max string // SPANK_GPU_COMPUTE, SPANK_GPU_COMPUTE_MAX
			want       *api.Compute
			lowered    bool // the daemon logs the change
		}
	}{
		{nil, []struct {
			share, max string
			want       *api.Compute
			lowered    bool
		}{
			{"", "", prop, false},
			{"100", "", prop, true},
			{"11", "", prop, true},
			{"10", "", percent(10, 0), false},
			{"5", "30", percent(5, 30), false},
			{"proportional", "", prop, false},
			{"", "40", &api.Compute{Mode: api.ComputeProportional, MaxPercent: 40}, false},
			{"off", "", prop, false},  // no share asked: the default
			{"fast", "", prop, false}, // not a share: the Prolog passes none
		}},
		{[]string{"--compute-max", "50", "--compute-cap", "60"}, []struct {
			share, max string
			want       *api.Compute
			lowered    bool
		}{
			{"", "", &api.Compute{Mode: api.ComputeProportional, MaxPercent: 60}, false},
			{"80", "", percent(50, 60), true},
			{"30", "90", percent(30, 60), true},
			{"30", "20", percent(30, 20), false},
		}},
		{[]string{"--compute-user-share=false", "--compute-cap", "proportional"}, []struct {
			share, max string
			want       *api.Compute
			lowered    bool
		}{
			{"5", "", &api.Compute{Mode: api.ComputeProportional, MaxPercent: 10}, true},
			{"", "5", &api.Compute{Mode: api.ComputeProportional, MaxPercent: 5}, false},
		}},
	} {
		t.Run(fmt.Sprint(site.flags), func(t *testing.T) {
			d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB", ExtraArgs: site.flags})
			prolog := testenv.Artifact(t, "bin/gpuslice-prolog")
			for i, tc := range site.cases {
				id := fmt.Sprintf("%d", 100+i)
				cmd := exec.Command(prolog, "--admin-socket", d.AdminSock)
				cmd.Env = append(testenv.BaseEnv(), "SLURM_JOB_ID="+id, "SLURM_JOB_UID=1000",
					fmt.Sprintf("SPANK_GPU_MEM=%d", 8<<30), "SPANK_GPU_COMPUTE="+tc.share, "SPANK_GPU_COMPUTE_MAX="+tc.max)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("job %s (--gpu-compute=%q --gpu-compute-max=%q): Prolog failed (%v): %s", id, tc.share, tc.max, err, out)
					continue
				}
				s, err := d.Client().GetSession(testenv.Context(t), id)
				if err != nil {
					t.Fatalf("job %s: %v", id, err)
				}
				if !reflect.DeepEqual(s.Compute, tc.want) {
					t.Errorf("job %s asked --gpu-compute=%q --gpu-compute-max=%q: share %s, want %s",
						id, tc.share, tc.max, s.Compute.String(), tc.want.String())
				}
				logged := logLine(d.Log(), id) != ""
				if logged != tc.lowered {
					t.Errorf("job %s asked --gpu-compute=%q --gpu-compute-max=%q: logged as lowered %v, want %v", id, tc.share, tc.max, logged, tc.lowered)
				}
			}
		})
	}
}

// logLine is gpusliced's line saying it lowered session id's share.
func logLine(log, id string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "compute share lowered to the site's policy") && strings.Contains(l, "session="+id+" ") {
			return l
		}
	}
	return ""
}

// Root's own requests (gpuslice allocate, the admin API without
// compute_policy) are taken as given: root is the site.
func TestAdminShareTakenAsGiven(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB"})
	s, err := d.Client().CreateSession(testenv.Context(t), client.SessionRequest{ID: "adm", QuotaBytes: 8 << 30, Compute: percent(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Compute, percent(100, 0)) {
		t.Errorf("root asked 100%% for 8 GiB of 80: got %s", s.Compute.String())
	}
	s, err = d.Client().CreateSession(testenv.Context(t), client.SessionRequest{ID: "none", QuotaBytes: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if s.Compute != nil {
		t.Errorf("root asked no share: got %s", s.Compute.String())
	}
}
