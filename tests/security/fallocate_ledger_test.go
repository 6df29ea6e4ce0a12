package security

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"golang.org/x/sys/unix"
)

// A process fallocates on the counters fd it received at ATTACH, to fill
// the runtime tmpfs so that root's next session create fails with ENOSPC.
// The file must not grow by a byte, and the next job's session must still
// be created.
func TestFallocateLedgerNextSessionCreated(t *testing.T) {
	d := daemon(t)
	id := session(t, d, "", 0, GiB).ID
	_, a := attachTo(t, d, id)
	fd := int(a.Counters.Fd())
	var before unix.Stat_t
	unix.Fstat(fd, &before)
	// The attack (its result does not matter), bounded to 64 MiB here so
	// that a daemon that lets it through does not fill this machine's /tmp:
	// what is checked is that the file cannot grow at all.
	unix.Fallocate(fd, 0, 0, 64<<20)
	var after unix.Stat_t
	unix.Fstat(fd, &after)
	if after.Size != before.Size || after.Blocks*512 > before.Size+1<<20 {
		t.Errorf("counters file grew: %d -> %d bytes (%d allocated)", before.Size, after.Size, after.Blocks*512)
	}
	if _, err := d.Client().CreateSession(ctx(t), client.SessionRequest{ID: id + "-next", UID: 0, QuotaBytes: GiB}); err != nil {
		t.Fatalf("the next job's session: %v", err)
	}
}
