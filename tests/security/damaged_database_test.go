package security

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// A zero-byte or garbled session database (disk full, a bad copy) must
// stop the daemon, never start it "fresh": that would forget every
// running job's session and delete their live ledgers.
func TestDamagedDatabaseStopsDaemon(t *testing.T) {
	for _, damage := range []struct {
		name string
		data func([]byte) []byte
	}{
		{"zero bytes", func([]byte) []byte { return nil }},
		{"garbled", func(b []byte) []byte {
			out := append([]byte(nil), b...)
			for i := 4096; i < len(out); i += 5 {
				out[i] ^= 0xa5
			}
			return out
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			d := daemon(t)
			id := session(t, d, "", 0, GiB).ID
			p := startCmd(t, probeCmd(t, "dev:0", "alloc:64M", "pause"), jobEnv(t, d, id))
			p.Expect("paused")
			d.Stop()
			db := filepath.Join(d.StateDir, "gpusliced.db")
			whole, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(db, damage.data(whole), 0o600)
			if !startFails(t, d) {
				t.Fatal("gpusliced started on a damaged database")
			}
			// The admin puts the backup back: nothing was lost, the job's
			// process is still charged in its ledger.
			os.WriteFile(db, whole, 0o600)
			d.Restart()
			if got := used(t, d, id); got != 64*MiB {
				t.Fatalf("after the database came back the session counts %d bytes, want 64 MiB", got)
			}
			p.Send("")
			p.Wait()
		})
	}
}

// startFails runs the stopped daemon's command line again and reports
// whether it exited with an error (naming the database) instead of serving.
func startFails(t *testing.T, d *testenv.Daemon) bool {
	t.Helper()
	cmd := exec.Command(testenv.Artifact(t, "bin/gpusliced"), d.Args()...)
	cmd.Env = d.DaemonEnv()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
		t.Logf("gpusliced: %v: %s", err, out)
		return err != nil && strings.Contains(string(out), "gpusliced.db")
	case <-timeAfter(t):
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		return false
	}
}
