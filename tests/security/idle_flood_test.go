package security

import (
	"os/exec"
	"testing"
)

// One local user (no session needed) holds thousands of idle IPC
// connections alive with PING. Another user's job must still attach and
// allocate within its quota.
func TestIdleFloodOtherUserServed(t *testing.T) {
	d := daemon(t)
	self := publicCopyOfSelf(t)
	cmd := asUser(t, "gsltest1", exec.Command(self))
	flood := startRole(t, cmd, []string{"SECURITY_ROLE=idle-flood", "SECURITY_SOCK=" + d.IPCSock, "SECURITY_N=4200"})
	n := flood.Expect("ready").Int(t, "n")
	t.Logf("the flooding user holds %d connections", n)

	id := session(t, d, "", uidOf(t, "gsltest2"), 256*MiB).ID
	cmd2 := asUser(t, "gsltest2", exec.Command(gsProbe(t), "dev:0", "alloc:64M", "meminfo"))
	p := startCmd(t, cmd2, jobEnv(t, d, id))
	if err := p.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, p.Output())
	}
	r := p.Result()
	if rc := r.Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Fatalf("another user's allocation during the flood: rc=%s, want 0\n%s", rc, p.Output())
	}
	if total := r.Find(t, "meminfo", 0).Get("total"); total != "268435456" {
		t.Fatalf("another user's process is not attached (total=%s)\n%s", total, p.Output())
	}
	if !d.Running() {
		t.Fatal("gpusliced died")
	}
	flood.CloseStdin()
}
