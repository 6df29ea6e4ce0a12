package core

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Stream-ordered allocations are charged to the GPU the memory lives on:
// cuMemAllocAsync to the stream's device, cuMemAllocFromPoolAsync to the
// pool's, whatever the current context is; and that GPU's quota decides.
func TestAsyncChargedToStreamOrPoolDevice(t *testing.T) {
	d, gpus := twoGPUNode(t)
	uuidOf := map[int]string{}
	for _, g := range gpus {
		uuidOf[g.Index] = g.UUID
	}
	quota := map[string]uint64{uuidOf[0]: GiB, uuidOf[1]: 512 * MiB}
	tests := []struct {
		name  string
		steps []string
		rcs   []string  // of the sasync / spool steps, in order
		want  [2]uint64 // MiB charged to ordinals 0 and 1
	}{
		{"cuMemAllocAsync on a device-1 stream, device 0 current",
			[]string{"dev:0", "stream:1", "sasync:300M", "sasync:300M"}, []string{"0", "2"}, [2]uint64{0, 300}},
		{"cuMemAllocAsync on the NULL stream, device 1 current",
			[]string{"dev:1", "sasync:300M"}, []string{"0"}, [2]uint64{0, 300}},
		{"created device-1 pool, NULL stream, device 0 current",
			[]string{"dev:0", "mkpool:1", "spool:200M", "spool:400M"}, []string{"0", "2"}, [2]uint64{0, 200}},
		{"device-1 pool from cuDeviceGetMemPool, device-0 stream",
			[]string{"dev:0", "stream:0", "devpool:1", "spool:200M"}, []string{"0"}, [2]uint64{0, 200}},
		{"device-0 pool, device-1 stream, device 1 current",
			[]string{"dev:1", "stream:1", "mkpool:0", "spool:700M", "sasync:100M"}, []string{"0", "0"},
			[2]uint64{700, 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess := newSession(t, d, client.SessionRequest{Quotas: quota})
			l := openLedger(t, d, sess.ID)
			// a pool keeps what is freed into it until a synchronisation
			args := append(append([]string{}, tc.steps...), "pid", "pause", "freeall", "sync", "pause")
			p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), args...)
			pid := int(p.Expect("pid").Int(t, "pid"))
			p.Expect("paused")
			held, ok := slotOf(t, l, pid)
			p.Send("")
			p.Expect("paused")
			after, _ := slotOf(t, l, pid)
			p.Send("")
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			r := p.Result()
			var got []string
			for _, s := range r.Steps {
				switch s.Name {
				case "sasync", "spool":
					got = append(got, s.Get("rc"))
				case "dev", "stream", "mkpool", "devpool":
					if s.Get("rc") != "0" {
						t.Fatalf("setup step failed: %s", s.Line)
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.rcs, ",") {
				t.Errorf("allocation results %v, want %v\n%s", got, tc.rcs, p.Output())
			}
			if !ok {
				t.Fatalf("no slot for pid %d", pid)
			}
			for ord := 0; ord < 2; ord++ {
				g := gpuIndex(t, l, uuidOf[ord])
				if held[g] != tc.want[ord]*MiB {
					t.Errorf("device %d (ledger GPU %d): %d bytes charged, want %d MiB (slot %v)",
						ord, g, held[g], tc.want[ord], held)
				}
				if after[g] != 0 {
					t.Errorf("device %d: %d bytes left after the frees and a synchronisation", ord, after[g])
				}
			}
			probe.Eventually(t, 30*time.Second, "used back to 0", func() (bool, string) {
				return l.Used(0) == 0 && l.Used(1) == 0, strconv.FormatUint(l.Used(0), 10) + "," +
					strconv.FormatUint(l.Used(1), 10)
			})
		})
	}
}
