package security

import (
	"errors"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Deleting a session while a process of it holds memory (another job's
// Epilog with the same uid, or an early Epilog) must not leave that memory
// allocated but uncounted: the delete is refused, the session keeps its
// quota and its charge, takes no new process, and is released as soon as
// its last process has exited.
func TestDeleteLiveSessionRefused(t *testing.T) {
	d := daemon(t)
	id := session(t, d, "", 0, 256*MiB).ID
	p := startCmd(t, probeCmd(t, "dev:0", "alloc:200M", "pause"), jobEnv(t, d, id))
	p.Expect("paused")
	_, err := d.Client().DeleteSession(ctx(t), id)
	if !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete with a live process: %v, want a conflict", err)
	}
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil || gpus[0].CommittedBytes != 256*MiB || gpus[0].UsedBytes != 200*MiB {
		t.Fatalf("after the refused delete the GPU shows %+v, %v; want 256 MiB committed, 200 MiB used", gpus, err)
	}
	q := startCmd(t, probeCmd(t, "dev:0", "alloc:1M"), jobEnv(t, d, id))
	q.Wait()
	if rc := q.Result().Find(t, "alloc", 0).Get("rc"); rc == "0" {
		t.Error("a new process attached to a session being deleted")
	}
	p.Send("")
	p.Wait()
	probe.Eventually(t, 10*time.Second, "released once its process exited", func() (bool, string) {
		_, err := d.Client().GetSession(ctx(t), id)
		return errors.Is(err, client.ErrNotFound), errString(err)
	})
	rep, err := d.Client().History(ctx(t), id)
	if err != nil || rep.Reason != "deleted" || rep.GPUs[0].PeakBytes < 200*MiB {
		t.Fatalf("report %+v, %v", rep, err)
	}
}
