package security

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The interceptor's VMM handle table has a fixed size. Once it was full, a
// new handle was handed out charged but unrecorded: its release gave
// nothing back, so the session kept the bytes of memory that no longer
// existed. A full table must fail closed: the handle is refused, and every
// byte charged comes back when the handles are released.
func TestVMMHandleTableFullFailsClosed(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "256GiB"})
	sess, l := natSession(t, d, client.SessionRequest{QuotaBytes: 250 << 30})
	p := probe.Start(t, natEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), "dev:0", "vmmfill:2M:70000", "freeall", "pause")
	fill := p.Expect("vmmfill")
	p.Expect("paused")
	// the process is alive: what it holds is what its session is charged
	if u := l.Used(0); u != 0 {
		t.Errorf("after every handle was released the session still holds %d MiB (%s)", u>>20, fill.Line)
	}
	p.CloseStdin()
	if err := p.Wait(); err != nil {
		t.Fatalf("gs_probe: %v\n%s", err, p.Output())
	}
	if fill.Get("rc") != "2" {
		t.Errorf("70000 handles in a table of 65536: %s, want a refusal (rc=2)", fill.Line)
	}
}
