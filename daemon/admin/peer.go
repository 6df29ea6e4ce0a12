package admin

// Which process sent a request: the admin socket's peer (SO_PEERCRED),
// taken when it connected, with the start time of the process that held
// its pid then (from a pidfd of that very process, SO_PEERPIDFD, where
// the kernel has it: Linux 6.5 and later). A session created for its
// creator (api.SessionRequest.CreatorPID) is bound to this process, never
// to a pid the request body names alone.

import (
	"context"
	"net"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/session"
)

type peerKey struct{}

// ConnContext is the admin server's http.Server.ConnContext: it keeps the
// connection's peer for the requests that come on it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	pidfd := -1
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			if p, perr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); perr == nil {
				pidfd = p
			}
		}
	})
	if err != nil || cred.Pid <= 0 {
		return ctx
	}
	p := session.Creator{PID: uint32(cred.Pid)}
	p.Start, err = reclaim.StartTime(p.PID)
	if pidfd >= 0 {
		// The pidfd is the connecting process's: if it is alive after the
		// read, the start time read is its.
		if gone, perr := reclaim.PidfdExited(pidfd); perr != nil || gone {
			err = reclaim.ErrGone
		}
		unix.Close(pidfd)
	}
	if err != nil {
		p.Start = 0 // unknown: a create for it is refused
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// peerOf is the peer of the connection a request came on.
func peerOf(ctx context.Context) (session.Creator, bool) {
	p, ok := ctx.Value(peerKey{}).(session.Creator)
	return p, ok
}
