package security

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A process linked against CUDA sends its ATTACH from the library's
// constructor and may read the answer much later (at its first CUDA
// call). The connection must not stay open meanwhile: a job's processes
// that wait before their first call would hold the uid's IPC connections
// (4 here, 64 by default) and its other processes could not attach.
func TestEarlyAttachHoldsNoConnection(t *testing.T) {
	d := daemon(t, "--ipc-conns-per-uid", "4")
	uid := uidOf(t, "gsltest1")
	id := session(t, d, "", uid, 256*MiB).ID
	env := jobEnv(t, d, id)
	// eight processes sleeping 6 s before their first hooked call
	for i := 0; i < 8; i++ {
		p := startCmd(t, asUser(t, "gsltest1", exec.Command(gsProbe(t), "sleep:6000", "dev:0", "alloc:1M")), env)
		t.Cleanup(func() { p.Cmd.Process.Kill() })
	}
	probe.Eventually(t, 20*time.Second, "the sleepers' early attaches", func() (bool, string) {
		s, err := d.Client().GetSession(ctx(t), id)
		if err != nil {
			return false, err.Error()
		}
		return len(s.Processes) >= 4, fmt.Sprint(len(s.Processes), " attached")
	})
	r := startCmd(t, asUser(t, "gsltest1", exec.Command(gsProbe(t), "dev:0", "alloc:64M", "meminfo")), env)
	if err := r.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, r.Output())
	}
	res := r.Result()
	if rc := res.Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Fatalf("a process of the same job while the others wait for their first call: alloc rc=%s, want 0\n%s%s",
			rc, r.Output(), r.Stderr())
	}
	if total := res.Find(t, "meminfo", 0).Get("total"); total != "268435456" {
		t.Fatalf("not attached (total=%s)\n%s", total, r.Output())
	}
}
