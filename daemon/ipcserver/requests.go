package ipcserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"time"

	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"golang.org/x/sys/unix"
)

func (s *Server) tokenOK(tok []byte) bool {
	if !s.opt.TokenRequired {
		return true
	}
	sum := sha256.Sum256(tok)
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

func codeFor(err error) uint32 {
	switch {
	case errors.Is(err, api.ErrNotFound):
		return ipc.CodeUnknown
	case errors.Is(err, session.ErrNotPermitted):
		return ipc.CodeNotPermitted
	case errors.Is(err, ledger.ErrNoSlot):
		return ipc.CodeNoSlot
	case errors.Is(err, session.ErrNoSession):
		return ipc.CodeNoSession
	default:
		return ipc.CodeInternal
	}
}

// handler answers one request type; a returned error closes the connection.
type handler func(s *Server, cc *conn, req ipc.Request) error

// handlers maps each request type to its handler. A new request type is a
// new entry (a file may add its own in an init function).
var handlers = map[ipc.Type]handler{
	ipc.TypePing:   (*Server).handlePing,
	ipc.TypeAttach: (*Server).handleAttach,
	ipc.TypeDetach: (*Server).handleDetach,
	ipc.TypeStatus: (*Server).handleStatus,
	ipc.TypeView:   (*Server).handleView,
	ipc.TypeShort:  (*Server).handleShort,
}

// handle answers one request. A returned error closes the connection.
func (s *Server) handle(cc *conn, req ipc.Request) error {
	if h, ok := handlers[req.Type]; ok {
		return h(s, cc, req)
	}
	return cc.writeError(ipc.CodeBadRequest, "not a request")
}

func (s *Server) handlePing(cc *conn, req ipc.Request) error {
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypePong, req.Ping)
	return cc.write(cc.out)
}

func (s *Server) handleAttach(cc *conn, req ipc.Request) error {
	if !s.tokenOK(req.Token) {
		s.opt.Log.Warn("ipc: attach with a bad token", "pid", cc.cred.Pid, "uid", cc.cred.Uid)
		return cc.writeError(ipc.CodeBadToken, "bad or missing token")
	}
	id := string(req.Session)
	a, err := s.m.Attach(id, cc.cred.Uid, uint32(cc.cred.Pid), s.peerCheck(cc))
	if err != nil {
		s.opt.Log.Info("ipc: attach refused", "session", id, "pid", cc.cred.Pid, "uid", cc.cred.Uid, "err", err)
		return cc.writeError(codeFor(err), err.Error())
	}
	defer a.Close()
	cc.session = a.Session
	cc.out = ipc.AppendAttachOK(cc.out[:0], uint32(a.Slot), uint32(a.NGPUs), a.Generation)
	oob := unix.UnixRights(a.Limits, a.Counters)
	if req.Flags&ipc.AttachCompute != 0 {
		// the page of the session the daemon attached it to, by its fd:
		// never a file found through a path the job's environment names
		cslot, cgen := uint32(ipc.NoComputeSlot), uint64(0)
		if s.opt.Compute != nil {
			if fd, slot, gen, ok := s.opt.Compute(a.Session); ok {
				cslot, cgen = slot, gen
				oob = unix.UnixRights(a.Limits, a.Counters, fd)
			}
		}
		cc.out = ipc.AppendAttachOKCompute(cc.out[:0], uint32(a.Slot), uint32(a.NGPUs), a.Generation, cslot, cgen)
	}
	cc.c.SetWriteDeadline(time.Now().Add(FrameTimeout))
	_, _, err = cc.c.WriteMsgUnix(cc.out, oob, nil)
	return err
}

func (s *Server) handleDetach(cc *conn, req ipc.Request) error {
	if err := s.m.Detach(cc.session, int(req.Slot), uint32(cc.cred.Pid)); err != nil {
		return cc.writeError(codeFor(err), err.Error())
	}
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypeOK, nil)
	return cc.write(cc.out)
}

func (s *Server) handleStatus(cc *conn, req ipc.Request) error {
	if !s.tokenOK(req.Token) {
		return cc.writeError(ipc.CodeBadToken, "bad or missing token")
	}
	id := string(req.Session)
	if err := s.m.CheckOwner(id, cc.cred.Uid); err != nil {
		return s.refuseRead(cc, err)
	}
	v, err := s.m.Get(id)
	if err != nil {
		return s.refuseRead(cc, err)
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) > ipc.MaxPayload {
		// Too many processes to fit a frame: drop the process list.
		v.Processes = nil
		b, _ = json.Marshal(v)
	}
	cc.out = ipc.AppendFrame(cc.out[:0], ipc.TypeStatusOK, b)
	return cc.write(cc.out)
}
