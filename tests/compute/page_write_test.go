package compute

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// A job of an ordinary user cannot release itself from the gate: its
// attempt to zero its throttle word on the compute page fails, and its
// share holds (its gate, running as that user, reads the page all along).
func TestUserCannotReleaseOwnShare(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (a second user)")
	}
	u := testenv.User(t, testenv.TestUser1)
	d := startDaemon(t)
	for _, s := range []struct {
		id  string
		uid uint32
		pct int
	}{{"cheat", u.UID, 25}, {"fair", 0, 75}} {
		if _, err := d.Client().CreateSession(t.Context(), client.SessionRequest{ID: s.id, UID: s.uid, QuotaBytes: 8 << 30,
			Compute: percent(s.pct, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	cheat := launchAs(t, d, &u, "cheat")
	fair := launch(t, d, "fair")
	page := filepath.Join(filepath.Dir(d.IPCSock), "compute")
	// every throttle word, zeroed as the job's user
	w := exec.Command("dd", "if=/dev/zero", "of="+page, "bs=64", "seek=1", "count=8192", "conv=notrunc")
	w.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	if out, err := w.CombinedOutput(); err == nil {
		t.Fatalf("a job's user wrote the compute page:\n%s", out)
	}
	settle()
	busy, _ := measure(t, d, window)
	got := shares(busy, cheat, fair)
	t.Logf("user job with share 25 that tried to write the page: measured %.1f", got)
	if math.Abs(got[0]-25) > 5 {
		t.Errorf("the user's job got %.1f%% of the GPU; its share is 25", got[0])
	}
}
