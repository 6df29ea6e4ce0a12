package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// withPlugstack replaces the plugin's arguments for the rest of the test.
// srun, sbatch, salloc and slurmstepd read plugstack.conf each time they
// start, so no daemon needs a restart.
func (c *cluster) withPlugstack(t *testing.T, args string) {
	t.Helper()
	c.withPlugstackOf(t, c.bin("plugin"), args)
}

// withPlugstackOf names plugin, with the arguments, in plugstack.conf for
// the rest of the test; the file is restored when the test ends.
func (c *cluster) withPlugstackOf(t *testing.T, plugin, args string) {
	t.Helper()
	path := c.path("plugstack.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := writeFile(path, string(old), 0o644); err != nil {
			t.Errorf("restore plugstack.conf: %v", err)
		}
	})
	if err := c.writePlugstackOf(plugin, args); err != nil {
		t.Fatal(err)
	}
}

// default= gives jobs that ask for nothing a quota; --gpu-mem still wins;
// whole GPUs asked without --gpu-mem get no quota.
func TestDefaultQuota(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest2"]
	c.withPlugstack(t, "default=512M max=4G")
	tests := []struct {
		name  string
		args  []string
		quota uint64
	}{
		{"no --gpu-mem: the default", nil, 512 * MiB},
		{"--gpu-mem wins", []string{"--gpu-mem=1G"}, 1 * GiB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"-v"}, tt.args...), c.bin("target_app"), "--step", "256M", "--count", "5")
			r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", args...))
			if r.code != 0 {
				t.Fatalf("srun: %s", r)
			}
			app := parseApp(t, r.stdout)
			if app.total != tt.quota || app.allowed != tt.quota/(256*MiB) {
				t.Fatalf("total %d, allowed %d; want a %d-byte quota", app.total, app.allowed, tt.quota)
			}
			id := jobID(t, r)
			c.assertReleased(t, id)
			if h := c.history(t, id); h.GPUs[0].LimitBytes != tt.quota {
				t.Fatalf("session limit %d, want %d", h.GPUs[0].LimitBytes, tt.quota)
			}
		})
	}
	// A job given a whole GPU without --gpu-mem gets the whole GPU: no
	// session, no interceptor (default= is for shares of a GPU). It was
	// held to the default before.
	t.Run("--gres=gpu:1 without --gpu-mem: the whole GPU", func(t *testing.T) {
		r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "-v", "--gres=gpu:1", "sh", "-c",
			`echo "event=env session=${GPUSLICE_SESSION:-none}"; `+c.bin("target_app")+" --step 256M --count 5"))
		if r.code != 0 {
			t.Fatalf("srun: %s", r)
		}
		id := jobID(t, r)
		n := c.jobNode(t, id)
		gpus, err := n.gpus()
		if err != nil {
			t.Fatal(err)
		}
		app := parseApp(t, r.stdout)
		if app.total != gpus[0].PhysicalBytes || app.allowed != 5 || app.denied != 0 {
			t.Errorf("total %d allowed %d denied %d; want the whole GPU (%d bytes) and every allocation",
				app.total, app.allowed, app.denied, gpus[0].PhysicalBytes)
		}
		if e := find(events(r.stdout), "env"); e["session"] != "none" {
			t.Errorf("the task was pointed at a session: %v", e)
		}
		c.waitJobEnd(t, id, time.Minute)
		if rep := run(ctxFor(t, 30*time.Second), n.onNode(nil, c.bin("gpuslice"), "--admin-socket", c.admSock, "report", id)); rep.code == 0 {
			t.Errorf("job %s has a gpusliced report: a session was created:\n%s", id, rep.stdout)
		}
		if log := readFile(t, c.path("log", "prolog-"+id+"-"+n.Name+".log")); !strings.Contains(log, "whole GPUs without --gpu-mem: no quota") {
			t.Errorf("the Prolog of job %s did not say why the job has no quota:\n%s", id, log)
		}
	})
}

// Bad plugin arguments are errors that name the plugin and the argument;
// with "required" the command refuses to run.
func TestPlugstackArguments(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	tests := []struct{ args, msg string }{
		{"bogus=1", "gpuslice: unknown plugstack.conf argument 'bogus'"},
		{"max=8X", "gpuslice: plugstack.conf argument max=8X: expected a positive size"},
		{"default=0", "gpuslice: plugstack.conf argument default=0: expected a positive size"},
		{"default=8G max=4G", "gpuslice: plugstack.conf: default= is larger than max="},
		{"lib=relative.so", "gpuslice: plugstack.conf argument lib=relative.so: expected an absolute path"},
		{"socket", "gpuslice: plugstack.conf argument 'socket': expected key=value"},
		{"nogpu=maybe", "gpuslice: plugstack.conf argument nogpu=maybe: expected hide or allow"},
		{"refused=run/refused", "gpuslice: plugstack.conf argument refused=run/refused: expected an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			c.withPlugstack(t, tt.args)
			before := c.jobCount(t)
			r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", "true"))
			if r.code == 0 || !strings.Contains(r.stderr, tt.msg) {
				t.Fatalf("srun with plugin arguments %q: %s\nwant a failure saying %q", tt.args, r, tt.msg)
			}
			if after := c.jobCount(t); after != before {
				t.Fatalf("a job was created (%d jobs, %d before)", after, before)
			}
		})
	}
}

// The plugin built for another Slurm release does not load: each release
// needs its own build (docs/slurm-releases.md). On 24.11,
// with the plugin built for 22.05 in plugstack.conf ("required"), srun
// refuses to run, says the plugin is incompatible, and no job is created;
// the same srun with 24.11's own plugin runs.
func TestOtherReleasePluginRefused(t *testing.T) {
	c := needCluster(t)
	u := c.users["gsltest1"]
	other := filepath.Join(c.build, slurm.otherPlugin)
	if _, err := os.Stat(other); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the plugin of another release (make spank-releases): %v", err)
		}
		t.Skipf("the plugin of another release is not built (make spank-releases; make test builds it): %v", err)
	}
	argv := []string{"-v", "--gpu-mem=1G", "true"}
	r := run(ctxFor(t, time.Minute), c.cmd(u, "srun", argv...))
	if r.code != 0 {
		t.Fatalf("srun with the plugin built for %s: %s", slurm.name, r)
	}
	c.assertReleased(t, jobID(t, r))
	before := c.jobCount(t)
	c.withPlugstackOf(t, other, c.opts.PlugstackArgs)
	r = run(ctxFor(t, time.Minute), c.cmd(u, "srun", argv...))
	if r.code == 0 {
		t.Fatalf("srun with %s on Slurm %s succeeded: %s", slurm.otherPlugin, slurm.name, r)
	}
	if !strings.Contains(strings.ToLower(r.stderr), "incompatible") {
		t.Errorf("srun's error does not say the plugin is incompatible: %s", r)
	}
	if after := c.jobCount(t); after != before {
		t.Errorf("a job was created (%d jobs, %d before)", after, before)
	}
	t.Logf("srun with %s on Slurm %s: exit %d: %s", slurm.otherPlugin, slurm.name, r.code, strings.TrimSpace(r.stderr))
}
