package compute

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/identity"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// jobCgroup makes the cgroup `gpuslice run` starts session id's command
// in (gpusliced finds the session of a process there, as it finds a
// Slurm job's from job_<id>) and returns its directory and an fd of it.
func jobCgroup(t *testing.T, id string) (string, int) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a job's cgroup")
	}
	root := filepath.Join("/sys/fs/cgroup", identity.V2Dir("/sys/fs/cgroup"))
	dir := filepath.Join(root, identity.RunCgroupPrefix+id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Skipf("no writable cgroup v2 hierarchy: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fd)
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		for range 100 {
			if err := unix.Rmdir(dir); err == nil || !errors.Is(err, unix.EBUSY) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir, fd
}

// frozen reports whether the kernel has frozen dir.
func frozen(dir string) bool {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return strings.Contains(string(b), "frozen 1")
}

// expectNoFreeze: gpusliced froze nothing (a well-behaved job is held at
// the gate, never frozen).
func expectNoFreeze(t *testing.T, d *testenv.Daemon) {
	t.Helper()
	if strings.Contains(d.Log(), "compute share: froze") {
		t.Errorf("gpusliced froze a session that launched through the gate:\n%s", grepLog(d, "froze"))
	}
}

func grepLog(d *testenv.Daemon, s string) string {
	var out []string
	for _, l := range strings.Split(d.Log(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// bypassWindow is what a bypassing job's share is measured over: it takes
// its round-robin part of the GPU for up to freezeAfter (2 s) before it is
// frozen, and is frozen until it has paid that back, so over a window of
// a few such cycles it gets its share, and never more than its share plus
// what it took in one freezeAfter (bypassExcess) in any window.
const bypassWindow = "20"

// bypassExcess is the most a job that bypasses the gate may get beyond its
// share over bypassWindow: one freezeAfter (2 s) at the half of the GPU it
// takes beside one neighbour process, plus a pass and a sample (0.2 s):
// 1.2 s of 20 s, 6 points.
const bypassExcess = 6

// A job that goes around the launch gate, by calling the driver's launch
// at its address in libcuda or by running without the interceptor, got
// 50 % against a share of 10 beside a job of 90: the gate is in the job's
// own process and only asks. gpusliced now sees from the driver's figures
// that the held session keeps using the GPU and freezes its processes'
// cgroup until it has paid its debt: it gets at most its share plus one
// freezeAfter's worth, and its neighbour, launching through the gate, is
// never frozen.
func TestBypassingTheGateIsFrozen(t *testing.T) {
	for _, route := range []struct {
		name string
		h    how
	}{
		{"driver's launch by address", how{env: []string{"FC_LAUNCH_DIRECT=1"}}},
		{"without the interceptor", how{unset: []string{"LD_PRELOAD"}}},
	} {
		t.Run(route.name, func(t *testing.T) {
			d := startDaemon(t)
			session(t, d, "cheat", 8<<30, percent(10, 0))
			session(t, d, "fair", 8<<30, percent(90, 0))
			dir, fd := jobCgroup(t, "cheat")
			h := route.h
			h.session, h.cgroup = "cheat", fd
			cheat := start(t, d, h)
			fair := launch(t, d, "fair")
			probe.Eventually(t, 15*time.Second, "the bypassing job frozen", func() (bool, string) {
				return strings.Contains(d.Log(), "compute share: froze") && frozen(dir), grepLog(d, "compute share")
			})
			busy, win := measure(t, d, bypassWindow)
			got := shares(busy, cheat, fair)
			t.Logf("%s: share 10 got %.1f%% over %.0f ms (freezes: %d)", route.name, got[0], win,
				strings.Count(d.Log(), "compute share: froze"))
			if got[0] > 10+bypassExcess {
				t.Errorf("a job going around the gate got %.1f%% of the GPU over %s s; its share is 10, want at most %d more",
					got[0], bypassWindow, bypassExcess)
			}
			if strings.Contains(grepLog(d, "compute share: froze"), "session=fair") {
				t.Errorf("the neighbour launching through the gate was frozen:\n%s", grepLog(d, "froze"))
			}
		})
	}
}

// A job of a small share (weight 1 to 5 beside the rest of 100) that
// launches past the gate but paces itself (a 2 ms kernel every 22 ms:
// about 9 % of the GPU) was held and never frozen: a held session
// counted as using the GPU only past a tenth of it, whatever its share
// (weight 2: 8.3 % over 15 s, measured). What a held session may use is
// now its own part: it is frozen, and over the window gets its share and
// what it takes in one freezeAfter (2 s at its pace: one or two points of
// 20 s), within its share and 5 points however it paces itself.
func TestPacedBypassOfSmallShareIsFrozen(t *testing.T) {
	for _, tc := range []struct {
		weight int
		pace   string // ms slept after each 2 ms kernel
	}{
		{2, "20"}, // about 9 %
		{1, "10"}, // about 17 %
		{5, "12"}, // about 14 %
	} {
		t.Run(fmt.Sprintf("weight %d, a kernel every %s ms", tc.weight, tc.pace), func(t *testing.T) {
			d := startDaemon(t)
			session(t, d, "cheat", 8<<30, percent(tc.weight, 0))
			session(t, d, "fair", 8<<30, percent(100-tc.weight, 0))
			dir, fd := jobCgroup(t, "cheat")
			cheat := start(t, d, how{session: "cheat", cgroup: fd, env: []string{"FC_LAUNCH_DIRECT=1", "FC_LAUNCH_PACE_MS=" + tc.pace}})
			fair := launch(t, d, "fair")
			probe.Eventually(t, 15*time.Second, "the paced bypassing job frozen", func() (bool, string) {
				return strings.Contains(d.Log(), "compute share: froze") && frozen(dir), grepLog(d, "compute share")
			})
			busy, win := measure(t, d, bypassWindow)
			got := shares(busy, cheat, fair)
			t.Logf("share %d, paced past the gate: got %.1f%% over %.0f ms (freezes: %d)", tc.weight, got[0], win,
				strings.Count(d.Log(), "compute share: froze"))
			if got[0] > float64(tc.weight+5) {
				t.Errorf("a job of share %d pacing its launches past the gate got %.1f%% of the GPU over %s s; want at most 5 points more",
					tc.weight, got[0], bypassWindow)
			}
			if strings.Contains(grepLog(d, "compute share: froze"), "session=fair") {
				t.Errorf("the neighbour launching through the gate was frozen:\n%s", grepLog(d, "froze"))
			}
		})
	}
}

// Nothing stays frozen: not when the session ends, not when gpusliced
// stops, not when it is killed (the next one thaws at start).
func TestFrozenJobIsThawed(t *testing.T) {
	freeze := func(t *testing.T, d *testenv.Daemon, id string) (string, *job) {
		t.Helper()
		session(t, d, id, 8<<30, percent(10, 0))
		dir, fd := jobCgroup(t, id)
		j := start(t, d, how{session: id, cgroup: fd, unset: []string{"LD_PRELOAD"}})
		probe.Eventually(t, 15*time.Second, "the bypassing job frozen", func() (bool, string) {
			return frozen(dir), grepLog(d, "compute share")
		})
		return dir, j
	}
	// frozenBeside starts a daemon with a session of 90 launching and
	// session id frozen beside it.
	frozenBeside := func(t *testing.T, id string) (*testenv.Daemon, string) {
		d := startDaemon(t)
		session(t, d, "fair", 8<<30, percent(90, 0))
		launch(t, d, "fair")
		dir, _ := freeze(t, d, id)
		return d, dir
	}
	thawed := func(t *testing.T, dir, after string) {
		t.Helper()
		probe.Eventually(t, 5*time.Second, "thawed "+after, func() (bool, string) {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			return strings.Contains(string(b), "frozen 0"), string(b)
		})
	}
	t.Run("session ends", func(t *testing.T) {
		d, dir := frozenBeside(t, "ends")
		if _, err := d.Client().DeleteSession(t.Context(), "ends"); err != nil {
			t.Fatal(err)
		}
		thawed(t, dir, "after its session was deleted")
	})
	t.Run("gpusliced stops", func(t *testing.T) {
		d, dir := frozenBeside(t, "stops")
		d.Stop()
		thawed(t, dir, "after gpusliced stopped")
	})
	t.Run("gpusliced killed", func(t *testing.T) {
		d, dir := frozenBeside(t, "killed")
		d.Kill()
		time.Sleep(300 * time.Millisecond)
		if !frozen(dir) {
			t.Fatal("thawed with nobody to thaw it: the test shows nothing")
		}
		d.Restart()
		thawed(t, dir, "by the next gpusliced at its start")
		if !strings.Contains(d.Log(), "thawed what a gpusliced that stopped uncleanly had frozen") {
			t.Errorf("the restarted gpusliced did not say what it thawed")
		}
	})
}

// The interceptor found the compute page next to the IPC socket the job's
// environment names, so a job that pointed GPUSLICE_IPC_SOCK at a symlink
// to the socket in a directory of its own, beside a "compute" file of its
// own making, read its own page and was never held (50 % against a share
// of 10, with gpusliced marking it held). The page now comes with ATTACH:
// the job is held at the gate, and needs no freeze.
func TestSymlinkedSocketStillGated(t *testing.T) {
	d := startDaemon(t)
	session(t, d, "cheat", 8<<30, percent(10, 0))
	session(t, d, "fair", 8<<30, percent(90, 0))
	own := t.TempDir()
	sock := filepath.Join(own, "ipc.sock")
	if err := os.Symlink(d.IPCSock, sock); err != nil {
		t.Fatal(err)
	}
	// a page of the job's making: the right layout, "cheat" in slot 0, never throttled
	page := make([]byte, 64+4096*128)
	le := binary.LittleEndian
	le.PutUint32(page[0:], 0x50435347)
	le.PutUint32(page[4:], 1)
	le.PutUint32(page[8:], 4096)
	le.PutUint64(page[16:], 1)
	le.PutUint64(page[64+8:], 1)
	copy(page[64+16:], "cheat")
	if err := os.WriteFile(filepath.Join(own, "compute"), page, 0o644); err != nil {
		t.Fatal(err)
	}
	cheat := start(t, d, how{session: "cheat", env: []string{"GPUSLICE_IPC_SOCK=" + sock}})
	fair := launch(t, d, "fair")
	settle()
	busy, win := measure(t, d, window)
	checkShares(t, fmt.Sprintf("share 10 with its socket named through a symlink beside a page of its own (window %.0f ms)", win),
		[]float64{10, 90}, busy, win, cheat, fair)
	expectNoFreeze(t, d)
}
