package security

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
)

const natOOM = 2 // CUDA_ERROR_OUT_OF_MEMORY

// The interceptor remembers which device each memory pool lives on in a
// table of fixed size. Once it was full, a pool created on a GPU the job
// has no quota on was not recorded, and an allocation from it was charged
// to the stream's device: another GPU of the job, which then paid for
// memory on a GPU outside the session. Every fixed table must fail closed:
// the pool (or the allocation) is refused, nothing is charged elsewhere.
func TestPoolTableFullFailsClosed(t *testing.T) {
	d, gpus := natTwoGPUNode(t)
	// quota on GPU 0 only; GPU 1 is not part of the session
	sess, l := natSession(t, d, client.SessionRequest{QuotaBytes: 1 << 30, GPUs: []string{gpus[0].UUID}})
	g0 := natGPUIndex(t, l, gpus[0].UUID)

	t.Run("control", func(t *testing.T) {
		r := natRunProbe(t, d, sess.ID, "dev:0", "mkpool:1", "spool:1M")
		if rc := r.Find(t, "mkpool", 0).Int(t, "rc"); rc != 0 {
			t.Fatalf("mkpool on device 1: rc=%d\n%s", rc, r.Stdout)
		}
		if rc := r.Find(t, "spool", 0).Int(t, "rc"); rc != natOOM {
			t.Fatalf("allocation from a pool on a GPU outside the session: rc=%d, want %d\n%s", rc, natOOM, r.Stdout)
		}
	})

	t.Run("full", func(t *testing.T) {
		peak0 := l.Peak(g0)
		r := natRunProbe(t, d, sess.ID, "dev:0", "mkpools:0:1100", "mkpool:1", "spool:1M")
		mk := r.Find(t, "mkpool", 0).Int(t, "rc")
		sp := r.Find(t, "spool", 0).Int(t, "rc")
		switch {
		case mk == 0 && sp == 0:
			t.Fatalf("a pool on GPU 1 made after %s pools was charged to GPU 0 (peak %d -> %d bytes)\n%s",
				r.Find(t, "mkpools", 0).Get("made"), peak0, l.Peak(g0), r.Stdout)
		case mk == 0 && sp != natOOM:
			t.Fatalf("allocation from the unrecorded pool: rc=%d, want %d\n%s", sp, natOOM, r.Stdout)
		case mk != 0 && mk != natOOM:
			t.Fatalf("pool creation with the table full: rc=%d, want %d\n%s", mk, natOOM, r.Stdout)
		}
		if mk == 0 && l.Peak(g0) != peak0 {
			t.Fatalf("GPU 0 charged for GPU 1: peak %d -> %d", peak0, l.Peak(g0))
		}
	})
}
