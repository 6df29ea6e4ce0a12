package security

import "testing"

// A job's process that drops GPUSLICE_SESSION (env -u, env -i, or a
// re-exec without it) is still its job's: gpusliced finds the job from the
// process's ancestry (its step's slurmstepd), and the quota applies.
func TestUnsetSessionStillCharged(t *testing.T) {
	d := daemon(t)
	session(t, d, "4242", 0, 256*MiB)
	p := stepd(t, "4242", jobEnv(t, d, ""), "", gsProbe(t), "dev:0", "alloc:200M", "alloc:200M", "meminfo")
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, p.Output())
	}
	r := p.Result()
	if rc := r.Find(t, "alloc", 1).Get("rc"); rc != "2" {
		t.Errorf("second 200 MiB allocation under a 256 MiB quota: rc=%s, want 2 (out of memory)\n%s", rc, p.Output())
	}
	if total := r.Find(t, "meminfo", 0).Get("total"); total != "268435456" {
		t.Errorf("cuMemGetInfo total=%s, want the 256 MiB quota", total)
	}
}
