package core

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
	"golang.org/x/sys/unix"
)

// Scale: a node holds many sessions, and one session many processes.
// Counts and sizes only; the times are make bench's.

// daemonFDs counts the open fds of the daemon.
func daemonFDs(t *testing.T, d *testenv.Daemon) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.PID()))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Idle sessions cost the daemon no fd (a ledger is reopened from the
// daemon's mapping when a process attaches) and their ledgers two pages
// of memory (the slots are holes until a process claims one).
func TestIdleSessionsCostNoFDAndTwoPages(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "4x80GiB"})
	const n = 500
	before := daemonFDs(t, d)
	var ids []string
	for i := 0; i < n; i++ {
		s := newSession(t, d, client.SessionRequest{QuotaBytes: 64 << 20})
		ids = append(ids, s.ID)
	}
	if added := daemonFDs(t, d) - before; added > 8 {
		t.Errorf("%d idle sessions added %d open fds to gpusliced, want none (at most 8 for sockets and the store)", n, added)
	}
	var blocks int64
	for _, id := range ids {
		lim, ctr := ledger.Paths(d.LedgerDir, id)
		for _, p := range []string{lim, ctr} {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			blocks += st.Blocks
		}
	}
	if per := blocks * 512 / n; per > 16<<10 {
		t.Errorf("an idle session's ledger holds %d bytes, want at most 16 KiB", per)
	}
	// A process attaches through the reopened files and is charged.
	l := openLedger(t, d, ids[0])
	r := runTarget(t, sessionEnv(t, d, ids[0]), "--step", "2MiB", "--count", "1")
	if !strings.Contains(r, "status=allowed") {
		t.Fatalf("target_app in an idle session:\n%s", r)
	}
	if got := l.Peak(0); got != 2<<20 {
		t.Errorf("peak after one 2 MiB allocation: %d", got)
	}
}

func runTarget(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(example(t, "target_app"), append([]string{"--api", "driver"}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("target_app: %v\n%s", err, out)
	}
	return string(out)
}

// holders starts n processes in the session of env, each allocating size
// bytes and then holding them (gs_probe's pause: a blocking read of
// stdin, so n holders cost no CPU; target_app's memory queries would make
// fakecuda sweep its process table), and waits until each has allocated.
// At most 8 are starting at any time (the machine is small; the bench
// times a real storm).
func holders(t *testing.T, env []string, n int, size string) []*exec.Cmd {
	t.Helper()
	cmds := make([]*exec.Cmd, 0, n)
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGKILL)
		}
		for _, c := range cmds {
			c.Wait()
		}
	})
	bin := probe.Bin(t, "gs_probe")
	errs := make(chan error, n)
	starting := make(chan struct{}, 8)
	for i := 0; i < n; i++ {
		starting <- struct{}{}
		cmd := exec.Command(bin, "dev:0", "alloc:"+size, "pause")
		cmd.Env = env
		if _, err := cmd.StdinPipe(); err != nil { // held open: pause blocks
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start process %d: %v", i, err)
		}
		cmds = append(cmds, cmd)
		go func() {
			sc := bufio.NewScanner(out)
			err := fmt.Errorf("pid %d did not reach pause", cmd.Process.Pid)
			allocated := false
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "alloc ") {
					allocated = strings.HasPrefix(line, "alloc rc=0 ")
					if !allocated {
						err = fmt.Errorf("pid %d: %s", cmd.Process.Pid, line)
					}
				}
				if line == "paused" {
					if allocated {
						err = nil
					}
					break
				}
			}
			<-starting
			errs <- err
		}()
	}
	var failed []string
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if err != nil {
				failed = append(failed, err.Error())
			}
		case <-time.After(5 * time.Minute):
			t.Fatalf("%d of %d processes did not allocate", n-i, n)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d processes failed, first: %s", len(failed), n, failed[0])
	}
	return cmds
}

// Live processes of one job attach to one session and each is charged in
// its own slot: 4,096 (the default ledger_slots) with GPUSLICE_SCALE_TESTS=1
// (make test-scale), 512 otherwise. fakecuda sweeps its whole process
// table at each process's first memory query, so n processes cost it
// O(n²) /proc reads: 4,096 take minutes on 2 cores.
func TestSessionServesManyProcesses(t *testing.T) {
	n := 512
	if os.Getenv("GPUSLICE_SCALE_TESTS") == "1" {
		n = ledger.DefaultSlots
	}
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	s := newSession(t, d, client.SessionRequest{QuotaBytes: uint64(n+16) << 16})
	l := openLedger(t, d, s.ID)
	cmds := holders(t, sessionEnv(t, d, s.ID), n, "64K")
	slots := map[uint32]uint64{}
	for _, sl := range l.Attached() {
		if sl.State == ledger.SlotAttached {
			slots[sl.PID] = sl.Used[0]
		}
	}
	for _, c := range cmds {
		if got, ok := slots[uint32(c.Process.Pid)]; !ok || got != 64<<10 {
			t.Fatalf("pid %d: attached %v, charged %d bytes, want 65536 (%d slots attached)", c.Process.Pid, ok, got, len(slots))
		}
	}
	if got := l.Used(0); got != uint64(n)*64<<10 {
		t.Errorf("session used %d, want %d", got, uint64(n)*64<<10)
	}
	// The list shows every process too.
	v, err := d.Client().GetSession(ctx(t), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Processes) != n {
		t.Errorf("GET shows %d processes, want %d", len(v.Processes), n)
	}
}

// A restart with many sessions loses none: idle ones are re-created from
// the store, ones with live processes are adopted with their charges.
func TestRestartKeepsManySessions(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "4x80GiB"})
	const n = 1000
	want := map[string]bool{}
	var busy []string
	for i := 0; i < n; i++ {
		s := newSession(t, d, client.SessionRequest{QuotaBytes: 64 << 20})
		want[s.ID] = true
		if i%250 == 0 {
			busy = append(busy, s.ID)
		}
	}
	for _, id := range busy {
		holders(t, sessionEnv(t, d, id), 2, "2M")
	}
	d.Restart()
	got, err := d.Client().ListSessions(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		delete(want, s.ID)
	}
	if len(got) != n || len(want) != 0 {
		t.Fatalf("after restart: %d sessions listed, %d missing", len(got), len(want))
	}
	for _, id := range busy {
		v, err := d.Client().GetSession(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Processes) != 2 || v.GPUs[0].UsedBytes != 4<<20 {
			t.Errorf("session %s after restart: %d processes, used %d, want 2 and 4 MiB", id, len(v.Processes), v.GPUs[0].UsedBytes)
		}
	}
	if _, err := os.Stat(filepath.Join(d.LedgerDir, busy[0]+".counters")); err != nil {
		t.Errorf("adopted ledger not linked again: %v", err)
	}
}
