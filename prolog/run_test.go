package prolog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// syncBuffer is a log the test can read while the Prolog writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testConfig(d *testenv.Daemon, log *syncBuffer) Config {
	return Config{AdminSocket: d.AdminSock, RetryTimeout: 20 * time.Second, CallTimeout: 5 * time.Second, Log: log}
}

func TestPrologEpilog(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
	ctx := context.Background()
	c := d.Client()
	gpus, err := c.GPUs(ctx)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs: %v, %v", gpus, err)
	}

	t.Run("no quota: no session", func(t *testing.T) {
		var log syncBuffer
		if err := Prolog(ctx, testConfig(d, &log), Job{ID: "100", UID: 1000}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetSession(ctx, "100"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("session 100: err %v, want not found", err)
		}
		if r := Epilog(ctx, testConfig(d, &log), Job{ID: "100", UID: 1000}); r != nil {
			t.Fatalf("epilog of a job without quota returned a report: %+v", r)
		}
	})

	t.Run("every GPU of the node, idempotent, released with a report", func(t *testing.T) {
		var log syncBuffer
		cfg := testConfig(d, &log)
		job := Job{ID: "101", UID: 1234, QuotaBytes: 8 << 30}
		for i := 0; i < 2; i++ { // a second run changes nothing
			if err := Prolog(ctx, cfg, job); err != nil {
				t.Fatalf("run %d: %v", i+1, err)
			}
		}
		s, err := c.GetSession(ctx, "101")
		if err != nil {
			t.Fatal(err)
		}
		if s.UID != 1234 || len(s.GPUs) != 2 {
			t.Fatalf("session: uid %d, %d GPUs; want uid 1234 on 2 GPUs", s.UID, len(s.GPUs))
		}
		for _, g := range s.GPUs {
			if g.LimitBytes != 8<<30 {
				t.Fatalf("GPU %s limit %d, want 8 GiB", g.UUID, g.LimitBytes)
			}
		}
		r := Epilog(ctx, cfg, job)
		if r == nil || r.ID != "101" || len(r.GPUs) != 2 || r.GPUs[0].LimitBytes != 8<<30 {
			t.Fatalf("epilog report %+v", r)
		}
		if _, err := c.GetSession(ctx, "101"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("session after epilog: %v", err)
		}
		if h, err := c.History(ctx, "101"); err != nil || h.UID != 1234 {
			t.Fatalf("history: %+v, %v", h, err)
		}
		// Epilog again (or where the Prolog never ran): nothing to do.
		if r := Epilog(ctx, cfg, job); r != nil {
			t.Fatalf("second epilog returned %+v", r)
		}
		if !strings.Contains(log.String(), "no session to release") {
			t.Fatalf("log does not say there was nothing to release:\n%s", log.String())
		}
	})

	t.Run("--ttl sets the session's TTL", func(t *testing.T) {
		var log syncBuffer
		cfg := testConfig(d, &log)
		cfg.TTL = 72 * time.Hour
		job := Job{ID: "106", UID: 1, QuotaBytes: 1 << 30}
		if err := Prolog(ctx, cfg, job); err != nil {
			t.Fatal(err)
		}
		s, err := c.GetSession(ctx, "106")
		if err != nil || s.TTLSeconds != 72*3600 {
			t.Fatalf("session %+v, %v; want a 72h TTL", s, err)
		}
		Epilog(ctx, cfg, job)
	})

	t.Run("the job's GPUs only", func(t *testing.T) {
		var log syncBuffer
		job := Job{ID: "102", UID: 1, QuotaBytes: 1 << 30, GPUs: []string{"1"}}
		if err := Prolog(ctx, testConfig(d, &log), job); err != nil {
			t.Fatal(err)
		}
		s, err := c.GetSession(ctx, "102")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.GPUs) != 1 || s.GPUs[0].UUID != gpus[1].UUID {
			t.Fatalf("session GPUs %+v, want only %s", s.GPUs, gpus[1].UUID)
		}
		Epilog(ctx, testConfig(d, &log), job)
	})

	t.Run("stale session of a requeued job id is replaced", func(t *testing.T) {
		var log syncBuffer
		cfg := testConfig(d, &log)
		if err := Prolog(ctx, cfg, Job{ID: "103", UID: 5, QuotaBytes: 1 << 30}); err != nil {
			t.Fatal(err)
		}
		job := Job{ID: "103", UID: 6, QuotaBytes: 2 << 30}
		if err := Prolog(ctx, cfg, job); err != nil {
			t.Fatal(err)
		}
		s, err := c.GetSession(ctx, "103")
		if err != nil || s.UID != 6 || s.GPUs[0].LimitBytes != 2<<30 {
			t.Fatalf("session %+v, %v; want uid 6 with 2 GiB", s, err)
		}
		Epilog(ctx, cfg, job)
	})

	t.Run("admission refused: error with the daemon's reason", func(t *testing.T) {
		var log syncBuffer
		err := Prolog(ctx, testConfig(d, &log), Job{ID: "104", UID: 1, QuotaBytes: 100 << 30})
		if !errors.Is(err, client.ErrQuotaExceeded) {
			t.Fatalf("err %v, want quota exceeded", err)
		}
		if !strings.Contains(err.Error(), "100GiB") {
			t.Fatalf("error %q does not name the quota", err)
		}
	})

	t.Run("daemon restarting: the Prolog waits for it", func(t *testing.T) {
		var log syncBuffer
		cfg := testConfig(d, &log)
		d.Stop()
		done := make(chan error, 1)
		job := Job{ID: "105", UID: 1, QuotaBytes: 1 << 30}
		go func() { done <- Prolog(ctx, cfg, job) }()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(log.String(), "unreachable, retrying") {
			if time.Now().After(deadline) {
				t.Fatalf("the Prolog did not report retrying; log:\n%s", log.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		d.Restart()
		if err := <-done; err != nil {
			t.Fatalf("Prolog across a restart: %v", err)
		}
		if _, err := d.Client().GetSession(ctx, "105"); err != nil {
			t.Fatal(err)
		}
		if r := Epilog(ctx, cfg, job); r == nil {
			t.Fatalf("epilog after restart found no session; log:\n%s", log.String())
		}
	})
}
