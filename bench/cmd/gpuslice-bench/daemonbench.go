package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// Figures timed against the benchmark's gpusliced: attach, session
// creation and the reclaim after kill -9.

// attachBench times the ATTACH round trip (connect to ATTACH_OK and its
// fds) of the benchmark process attaching again and again to one session.
func attachBench(d *daemon, n int) (p50, p99 float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const id = "bench-attach"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
		return 0, 0, err
	}
	defer d.cl.DeleteSession(ctx, id)
	lat := make([]float64, 0, n)
	for i := 0; i < n+50; i++ {
		t0 := time.Now()
		c, err := ipc.Dial(d.ipcSock)
		if err != nil {
			return 0, 0, err
		}
		a, err := c.Attach(id, "")
		el := time.Since(t0)
		if err != nil {
			c.Close()
			return 0, 0, err
		}
		// A DETACH frees nothing (the slot stays until the process exits):
		// every ATTACH after the first is this process attaching again,
		// which keeps its slot (no claim of a new one, no new pidfd). What
		// a new process pays is exec_to_first_alloc_added_ms.
		if err := c.Detach(a.Slot); err != nil {
			return 0, 0, err
		}
		a.Close()
		c.Close()
		if i >= 50 {
			lat = append(lat, float64(el.Nanoseconds())/1e3)
		}
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}

func createBench(d *daemon, n int) (p50, p99 float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("bench-create-%d", i)
		t0 := time.Now()
		if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: 1000, QuotaBytes: 64 << 20}); err != nil {
			return 0, 0, err
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	for i := 0; i < n; i++ {
		if _, err := d.cl.DeleteSession(ctx, fmt.Sprintf("bench-create-%d", i)); err != nil {
			return 0, 0, err
		}
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}

// reclaimBench times kill -9 of a process holding 256 MiB to the moment the
// session's ledger shows the bytes back (the daemon's pidfd reclaim), read
// from the ledger itself every 50 µs. The 1 s bound is the design's "bytes
// back the moment it dies" made measurable; tests only check that it happens.
func reclaimBench(o options, d *daemon, n int) (p50, max float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const id = "bench-reclaim"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 1 << 30}); err != nil {
		return 0, 0, err
	}
	defer d.cl.DeleteSession(ctx, id)
	l, err := ledger.Open(filepath.Join(d.dir, "run", "ledgers"), id)
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	env := append(baseEnv(), "FAKECUDA_DEVICES="+d.devices, "FAKECUDA_STATE="+d.state,
		"LD_PRELOAD="+filepath.Join(o.build, "lib", "libgpuslice.so"),
		"LD_LIBRARY_PATH="+filepath.Join(o.build, "lib"),
		"GPUSLICE_SESSION="+id, "GPUSLICE_IPC_SOCK="+d.ipcSock)
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		cmd := exec.Command(filepath.Join(o.build, "examples", "target_app"), "--api", "driver",
			"--step", "64MiB", "--count", "4", "--hold", "60")
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			return 0, 0, err
		}
		for start := time.Now(); l.Used(0) < 256<<20; time.Sleep(time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				cmd.Process.Kill()
				cmd.Wait()
				return 0, 0, fmt.Errorf("target_app did not charge 256 MiB (used %d)", l.Used(0))
			}
		}
		t0 := time.Now()
		cmd.Process.Signal(syscall.SIGKILL)
		for l.Used(0) != 0 {
			if time.Since(t0) > 30*time.Second {
				cmd.Wait()
				return 0, 0, fmt.Errorf("not reclaimed after 30 s (used %d)", l.Used(0))
			}
			time.Sleep(50 * time.Microsecond)
		}
		el := float64(time.Since(t0).Nanoseconds()) / 1e6
		cmd.Wait()
		lat = append(lat, el)
		if el > max {
			max = el
		}
	}
	return percentile(lat, 50), max, nil
}
