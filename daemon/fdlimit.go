package daemon

import (
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/ledger"
)

// fdsPerLedger is what a session's ledger costs in open fds when the
// daemon cannot reopen its own mappings (no CAP_SYS_ADMIN).
const fdsPerLedger = 2

// fdReserve is kept for sockets, the store, pidfds of attached processes
// and /proc reads.
const fdReserve = 1024

// checkFDLimit logs what the open-file limit allows. The Go runtime has
// already raised the soft limit to the hard one. With CAP_SYS_ADMIN a
// ledger holds no fd (it is reopened from the daemon's mapping when a
// process attaches), so idle sessions cost none; without it each costs
// two, and a limit too small for sessions is said at start.
func checkFDLimit(log *slog.Logger, conns int) (fdless bool, sessions uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return false, 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	fdless = ledger.ReopensMappings()
	if fdless {
		log.Info("open-file limit", "soft", lim.Cur, "hard", lim.Max,
			"ledger_fds", "none while idle (reopened from the daemon's mapping on attach)")
		return true, 0, nil
	}
	if lim.Cur > fdReserve {
		sessions = (lim.Cur - fdReserve) / fdsPerLedger
	}
	log.Warn("ledgers hold 2 fds per session (no CAP_SYS_ADMIN to reopen mappings): the open-file limit bounds the sessions",
		"soft", lim.Cur, "hard", lim.Max, "sessions_allowed", sessions, "ipc_conns_per_uid", conns)
	return false, sessions, nil
}
