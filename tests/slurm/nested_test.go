package slurm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// Jobs submitted from inside a job with a quota (sbatch, salloc, or srun
// outside the allocation, from a batch script). Slurm copies every
// SLURM_SPANK_* variable of the submitting environment into the new job,
// and reads SLURM_SPANK__SLURM_SPANK_OPTION_gpuslice_gpu_mem back as the
// new job's --gpu-mem: without care the new job would silently get the
// outer job's quota (and its Prolog could drain the node when gpusliced
// refuses it). A new job's quota comes only from its own --gpu-mem (or
// default=), while srun steps of the outer job keep sharing the outer
// quota.
func TestNestedSubmission(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	app := c.bin("target_app")
	show := func(kind string) string {
		return `echo "event=inner kind=` + kind +
			` job=$SLURM_JOB_ID preload=${LD_PRELOAD:-none} session=${GPUSLICE_SESSION:-none} spank=${SLURM_SPANK_GPU_MEM:-none}"`
	}
	// An inner job that asks for 1 GiB in its own #SBATCH line.
	inner := fmt.Sprintf("#!/bin/sh\n#SBATCH --gpu-mem=1G\n#SBATCH --output=%s/nested-script-%%j.out\n%s\n%s --step 512M --count 3\n",
		u.dir, show("script"), app)
	if err := writeFile(filepath.Join(u.dir, "nested-inner.sh"), inner, 0o755); err != nil {
		t.Fatal(err)
	}
	outer := fmt.Sprintf(`#!/bin/sh
#SBATCH --gpu-mem=2G
#SBATCH --output=%[1]s/nested-outer-%%j.out
cd %[1]s
echo "event=outer job=$SLURM_JOB_ID spank=${SLURM_SPANK_GPU_MEM:-none}"
sbatch --wait --output=nested-none-%%j.out --wrap '%[2]s'
echo "event=submitted kind=none exit=$?"
sbatch --wait --gpu-mem=1G --output=nested-own-%%j.out --wrap '%[3]s; %[4]s --step 512M --count 3'
echo "event=submitted kind=own exit=$?"
sbatch --wait ./nested-inner.sh
echo "event=submitted kind=script exit=$?"
salloc srun sh -c '%[5]s'
echo "event=submitted kind=salloc exit=$?"
env -u SLURM_JOB_ID -u SLURM_JOBID srun sh -c '%[6]s'
echo "event=submitted kind=srun exit=$?"
srun --output=nested-step.out %[4]s --step 1G --count 3
echo "event=submitted kind=step exit=$?"
`, u.dir, show("none"), show("own"), app, show("salloc"), show("srun"))
	id := c.sbatch(t, u, "nested-outer", outer)
	j := c.waitJobEnd(t, id, 4*time.Minute)
	out := readFile(t, filepath.Join(u.dir, "nested-outer-"+id+".out"))
	if j["JobState"] != "COMPLETED" {
		t.Fatalf("outer job %s: %s\n%s", id, j["JobState"], out)
	}
	evs := events(out)
	for _, kind := range []string{"none", "own", "script", "salloc", "srun", "step"} {
		if e := find(evs, "submitted", "kind", kind); e == nil || e["exit"] != "0" {
			t.Errorf("inner %s: %v, want exit 0\n%s", kind, e, out)
		}
	}
	if e := find(evs, "outer"); e["spank"] != fmt.Sprint(2*GiB) {
		t.Fatalf("outer job's environment: %v, want SLURM_SPANK_GPU_MEM=%d", e, 2*GiB)
	}
	// Inner jobs write their line either to their own output file (sbatch)
	// or to the outer job's (salloc, srun).
	innerEvent := func(kind string) event {
		t.Helper()
		text := out
		if kind == "none" || kind == "own" || kind == "script" {
			m, _ := filepath.Glob(filepath.Join(u.dir, "nested-"+kind+"-*.out"))
			if len(m) != 1 {
				t.Fatalf("inner %s: output files %v, want one", kind, m)
			}
			text = readFile(t, m[0])
		}
		e := find(events(text), "inner", "kind", kind)
		if e == nil || e["job"] == "" || e["job"] == id {
			t.Fatalf("inner %s: %v, want a job of its own\n%s", kind, e, text)
		}
		return e
	}

	for _, kind := range []string{"none", "salloc", "srun"} {
		t.Run("without --gpu-mem: "+kind, func(t *testing.T) {
			e := innerEvent(kind)
			if e["preload"] != "none" || e["session"] != "none" || e["spank"] != "none" {
				t.Errorf("inner job %s (%s) without --gpu-mem: %v; want no LD_PRELOAD, GPUSLICE_SESSION or SLURM_SPANK_GPU_MEM",
					e["job"], kind, e)
			}
			jn := c.jobNode(t, e["job"])
			env := c.prologEnv(t, e["job"], jn)
			if strings.Contains(env, "SPANK_GPU_MEM") || strings.Contains(env, "gpuslice_gpu_mem") {
				t.Errorf("the Prolog of inner job %s (%s) got a quota:\n%s", e["job"], kind, env)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cl := jn.client()
			defer cl.Close()
			if rep, err := cl.History(ctx, e["job"]); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("gpusliced knows a session for inner job %s (%s), which asked for no quota: %+v %v",
					e["job"], kind, rep, err)
			}
		})
	}

	for _, kind := range []string{"own", "script"} {
		t.Run("with its own --gpu-mem=1G: "+kind, func(t *testing.T) {
			e := innerEvent(kind)
			if e["session"] != e["job"] || !strings.HasSuffix(e["preload"], c.bin("interceptor")) || e["spank"] != fmt.Sprint(1*GiB) {
				t.Errorf("inner job %s (%s): %v; want its own session, the interceptor, SLURM_SPANK_GPU_MEM=%d",
					e["job"], kind, e, 1*GiB)
			}
			m, _ := filepath.Glob(filepath.Join(u.dir, "nested-"+kind+"-*.out"))
			if a := parseApp(t, readFile(t, m[0])); a.total != 1*GiB || a.allowed != 2 || a.denied != 1 {
				t.Errorf("inner job %s (%s): total %d allowed %d denied %d; want its own 1 GiB quota",
					e["job"], kind, a.total, a.allowed, a.denied)
			}
			c.assertReleased(t, e["job"])
			if h := c.history(t, e["job"]); h.GPUs[0].LimitBytes != 1*GiB {
				t.Errorf("session of inner job %s (%s): limit %d, want 1 GiB", e["job"], kind, h.GPUs[0].LimitBytes)
			}
		})
	}

	t.Run("steps of the outer job keep its quota", func(t *testing.T) {
		a := parseApp(t, readFile(t, filepath.Join(u.dir, "nested-step.out")))
		if a.total != 2*GiB || a.allowed != 2 || a.denied != 1 {
			t.Errorf("srun step of the outer job: total %d allowed %d denied %d; want the outer 2 GiB", a.total, a.allowed, a.denied)
		}
		c.assertReleased(t, id)
		if h := c.history(t, id); h.GPUs[0].LimitBytes != 2*GiB || h.GPUs[0].PeakBytes != 2*GiB {
			t.Errorf("session of the outer job %s: %+v", id, h.GPUs[0])
		}
	})
	if err := c.waitNodeState("idle", 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
