package ipcserver

// Which process an ATTACH registers. SO_PEERCRED gives the pid of the
// process that made the connection, taken when it connected; that process
// may have exited since and its pid been given to another process (of
// another user), while a child holding the connection sends the ATTACH.
// The ATTACH is refused then: gpusliced registers a process only while the
// one that connected is alive (with SO_PEERPIDFD, Linux 6.5 and later: a
// pidfd of the very process that connected), or, on older kernels, while
// the process holding its pid started when it did (its start time, read
// when the connection was accepted).

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/session"
)

// peerPidfdWorks reports whether this kernel answers SO_PEERPIDFD (asked
// once, on a socket pair).
func peerPidfdWorks() bool {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	fd, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// peerPidfd is a pidfd of the process that made connection c.
func peerPidfd(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, serr := -1, error(nil)
	if err := raw.Control(func(s uintptr) {
		fd, serr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return -1, err
	}
	return fd, serr
}

// peerCheck is the session.PeerCheck of connection cc.
func (s *Server) peerCheck(cc *conn) session.PeerCheck {
	return func(start uint64) error {
		if !s.pidfds {
			if cc.peerStart != 0 && start != cc.peerStart {
				return fmt.Errorf("%w (pid %d started at %d, the connection's process at %d)",
					session.ErrPeerGone, cc.cred.Pid, start, cc.peerStart)
			}
			return nil
		}
		fd, err := peerPidfd(cc.c)
		if errors.Is(err, unix.ESRCH) {
			return session.ErrPeerGone // reaped already
		}
		if err != nil {
			return fmt.Errorf("SO_PEERPIDFD: %w", err)
		}
		defer unix.Close(fd)
		gone, err := reclaim.PidfdExited(fd)
		if err != nil {
			return fmt.Errorf("poll the peer's pidfd: %w", err)
		}
		if gone {
			return session.ErrPeerGone
		}
		return nil
	}
}
