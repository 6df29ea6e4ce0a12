package core

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// A VMM handle released while it is still mapped (cuMemCreate → cuMemMap →
// cuMemRelease, as the CUDA samples do) keeps its memory: it stays charged
// until its last mapping is gone, however the mappings are taken down.
func TestVMMChargedWhileMapped(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	contiguous := []string{"vmmmap:400M", "vmmmap:400M", "vmmmap:400M"}
	withGap := []string{"vmmmap:400M:0", "vmmmap:400M:1G", "vmmmap:400M:2G"}
	tests := []struct {
		name string
		maps []string // three 400 MiB handles created, mapped and released: the third is denied
		down []string // then these steps; each "pause" checks the next figure of used
		used []uint64 // MiB charged at each pause of down, the last one after it
	}{
		{"one unmap per mapping", contiguous, []string{"unmap", "pause", "unmap"}, []uint64{400, 0}},
		{"one unmap over both mappings", contiguous, []string{"unmaprange:0:800M"}, []uint64{0}},
		{"one unmap over a range with a hole", withGap, []string{"unmaprange:0:2G"}, []uint64{0}},
		{"unmap of one, the other stays", withGap, []string{"unmaprange:1G:400M", "pause", "unmaprange:0:400M"},
			[]uint64{400, 0}},
		{"address range freed with its mappings", contiguous, []string{"addrfree", "reserve:4G"}, []uint64{0}},
		{"retained handle outlives the mappings", contiguous, []string{"retain", "unmap", "unmap", "pause", "free"},
			[]uint64{400, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess := newSession(t, d, client.SessionRequest{QuotaBytes: 1000 * MiB})
			l := openLedger(t, d, sess.ID)
			args := append([]string{"dev:0", "reserve:4G"}, tc.maps...)
			args = append(args, "pid", "pause")
			args = append(args, tc.down...)
			args = append(args, "pause", "vmmmap:400M", "vmmmap:400M", "pause", "addrfree")
			p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_probe"), args...)
			pid := int(p.Expect("pid").Int(t, "pid"))
			want := append([]uint64{800}, tc.used...)
			want = append(want, 800)
			for i, w := range want {
				p.Expect("paused")
				slot, ok := slotOf(t, l, pid)
				if got := l.Used(0); got != w*MiB || !ok || slot[0] != w*MiB {
					t.Errorf("pause %d: used %d, slot %v; want %d MiB in both\n%s", i, got, slot, w, p.Output())
				}
				p.Send("")
			}
			if err := p.Wait(); err != nil {
				t.Fatalf("probe: %v\n%s", err, p.Output())
			}
			noStderr(t, "probe", p.Stderr())
			r := p.Result()
			vm := r.All("vmmmap")
			if len(vm) != 5 {
				t.Fatalf("%d vmmmap steps:\n%s", len(vm), p.Output())
			}
			for i, s := range vm {
				ok := s.Get("rc") == "0" && s.Get("map") == "0" && s.Get("release") == "0"
				if i == 2 {
					ok = s.Get("rc") == "2"
				}
				if !ok {
					t.Errorf("vmmmap #%d: %s (want the third denied, the others mapped and released)", i, s.Line)
				}
			}
			for _, s := range r.Steps {
				if s.Name != "vmmmap" && s.Name != "pid" && s.Name != "paused" && s.Get("rc") != "" && s.Get("rc") != "0" {
					t.Errorf("step failed: %s", s.Line)
				}
			}
			// addrfree took the last two mappings down: nothing left for the daemon
			probe.Eventually(t, 30*time.Second, "used back to 0", func() (bool, string) {
				return l.Used(0) == 0 && l.Reclaimed(0) == 0, strconv.FormatUint(l.Used(0), 10) + " reclaimed " +
					strconv.FormatUint(l.Reclaimed(0), 10)
			})
			if strings.Contains(p.Output(), "error ") {
				t.Errorf("probe:\n%s", p.Output())
			}
		})
	}
}

// Threads that create, map, release, retain and unmap VMM handles at once,
// in every order: the quota holds throughout and every byte comes back.
// Handles are 2, 4, 6 or 8 MiB against a 6 MiB quota, so every 8 MiB
// request is denied even when the threads happen to run one at a time.
func TestVMMStorm(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	const quota = 6 * MiB
	sess := newSession(t, d, client.SessionRequest{QuotaBytes: quota})
	l := openLedger(t, d, sess.ID)
	p := probe.Start(t, sessionEnv(t, d, sess.ID), probe.Bin(t, "gs_vmmstorm"), "8", "400")
	done := p.Expect("done")
	p.Expect("paused")
	used := l.Used(0)
	var slot uint64
	for _, s := range l.Attached() {
		slot += s.Used[0]
	}
	p.Send("")
	if err := p.Wait(); err != nil {
		t.Fatalf("gs_vmmstorm: %v\n%s", err, p.Output())
	}
	noStderr(t, "gs_vmmstorm", p.Stderr())
	if done.Get("errors") != "0" || done.Uint(t, "rounds") == 0 || done.Uint(t, "denied") == 0 {
		t.Errorf("%s: want rounds and denials, no errors", done.Line)
	}
	if used != 0 || slot != 0 {
		t.Errorf("after the storm, before exit: used %d, slot %d; want 0", used, slot)
	}
	if pk := l.Peak(0); pk > quota || pk == 0 {
		t.Errorf("peak %d, quota %d", pk, quota)
	}
	if l.Reclaimed(0) != 0 {
		t.Errorf("reclaimed %d at exit, want 0", l.Reclaimed(0))
	}
}
