package core

import (
	"fmt"
	"os"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A process that allocates and then execs another program: the driver
// frees the old image's memory at exec, so the new program has the whole
// quota (and, without the interceptor, the whole fake GPU). The old image's
// charge is counted as reclaimed, not as held.
func TestExecGivesBackTheOldImage(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 512 * MiB
	args := []string{"384M", example(t, "target_app"), "--api", "driver", "--step", "128MiB", "--count", "4"}

	t.Run("in a session", func(t *testing.T) {
		sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
		l := openLedger(t, d, sess.ID)
		r := probe.Run(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_exec"), args...)
		if r.Err != nil {
			t.Fatalf("gs_exec: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		noStderr(t, "gs_exec", r.Stderr)
		r.Find(t, "held", 0)
		summary(4, 0)(t, r)
		if l.Used(0) != 0 || l.Reclaimed(0) != 384*MiB || l.Peak(0) != quota {
			t.Errorf("ledger used %d, reclaimed %d, peak %d; want 0, %d (the old image), %d",
				l.Used(0), l.Reclaimed(0), l.Peak(0), 384*MiB, quota)
		}
	})

	t.Run("fakecuda alone", func(t *testing.T) {
		state := fmt.Sprintf("gs-exec-%d", os.Getpid())
		t.Cleanup(func() { os.Remove("/dev/shm/fakecuda-" + state) })
		env := append(d.Env(), "FAKECUDA_DEVICES=512MiB", "FAKECUDA_STATE="+state)
		r := probe.Run(t, env, probe.Bin(t, "gs_exec"), args...)
		if r.Err != nil {
			t.Fatalf("gs_exec: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		summary(4, 0)(t, r)
	})
}
