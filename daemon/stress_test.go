package daemon_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestConcurrentChurn runs creates, deletes, attaches, detaches, reads and
// scrapes at the same time; the daemon must stay up and consistent.
func TestConcurrentChurn(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB", Listen: true, RecoveryInterval: 50e6,
		ExtraEnv: []string{"GPUSLICE_METRICS_DEBUG=1"}})
	c := d.Client()
	const workers, rounds = 6, 25
	var wg sync.WaitGroup
	errc := make(chan error, workers*rounds*4+64)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn, err := ipc.Dial(d.IPCSock)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Close()
			for i := 0; i < rounds; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := c.CreateSession(ctx(t), client.SessionRequest{ID: id, UID: 0, QuotaBytes: giB}); err != nil {
					errc <- fmt.Errorf("create %s: %w", id, err)
					return
				}
				if i%2 == 1 {
					// A session this (live) test process is attached to
					// cannot be released: delete is refused and the
					// session takes no new process.
					a, err := conn.Attach(id, "")
					if err != nil {
						errc <- fmt.Errorf("attach %s: %w", id, err)
						return
					}
					if _, err := conn.Status(id, ""); err != nil {
						errc <- fmt.Errorf("status %s: %w", id, err)
					}
					conn.Detach(a.Slot)
					a.Close()
					if _, err := c.DeleteSession(ctx(t), id); !errors.Is(err, client.ErrConflict) {
						errc <- fmt.Errorf("delete %s with a live process: %v, want ErrConflict", id, err)
					}
					if _, err := conn.Attach(id, ""); err == nil {
						errc <- fmt.Errorf("attach to %s after its delete succeeded", id)
					}
					continue
				}
				if _, err := c.ListSessions(ctx(t)); err != nil {
					errc <- err
				}
				if _, err := c.DeleteSession(ctx(t), id); err != nil {
					errc <- fmt.Errorf("delete %s: %w", id, err)
				}
				// The session is gone for every path.
				if _, err := conn.Attach(id, ""); err == nil {
					errc <- fmt.Errorf("attach to deleted %s succeeded", id)
				}
				if _, err := c.GetSession(ctx(t), id); !errors.Is(err, client.ErrNotFound) {
					errc <- fmt.Errorf("get deleted %s: %v", id, err)
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 40; i++ {
			r, err := http.Get("http://" + d.Listen + "/metrics")
			if err != nil {
				errc <- err
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if _, err := c.GPUs(ctx(t)); err != nil {
				errc <- err
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	gpus, err := c.GPUs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// Only the sessions this process is still attached to remain.
	pending := workers * (rounds / 2)
	for _, g := range gpus {
		if g.CommittedBytes != uint64(pending)*giB || g.Sessions != pending || g.UsedBytes != 0 {
			t.Fatalf("after churn: %+v, want %d sessions pending release", g, pending)
		}
	}
	if !d.Running() {
		t.Fatal("daemon died")
	}
}
