package ipcserver

import (
	"errors"
	"net"
	"time"

	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"
)

// connBufs are a worker's buffers, used by one connection at a time.
type connBufs struct {
	buf []byte // HeaderSize+MaxPayload
	out []byte
}

// maxKeptOut bounds the reply buffer a worker keeps between connections
// (a STATUS reply may have grown it).
const maxKeptOut = 64 << 10

// conn is one connection while a worker serves it: its frames are read
// with the idle and frame deadlines (docs/protocol.md) and answered here.
type conn struct {
	c         *net.UnixConn
	cred      *unix.Ucred
	peerStart uint64 // the peer's start time at accept (kernels without SO_PEERPIDFD), 0 unknown
	buf       []byte // HeaderSize+MaxPayload
	start     int    // unread data is buf[start:end]
	end       int
	out       []byte
	session   string // session attached on this connection

	idleArmed time.Time // when the idle deadline was last set
	partial   bool      // the frame deadline (not the idle one) is armed
}

func (s *Server) serveConn(a accepted, bufs *connBufs) {
	c, cred := a.c, a.cred
	cc := &conn{c: c, cred: cred, peerStart: a.start, buf: bufs.buf, out: bufs.out[:0]}
	defer func() {
		if cap(cc.out) <= maxKeptOut {
			bufs.out = cc.out[:0]
		}
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		if s.perUID[cred.Uid]--; s.perUID[cred.Uid] <= 0 {
			delete(s.perUID, cred.Uid)
		}
		s.mu.Unlock()
		s.wg.Done()
	}()
	for {
		t, payload, err := cc.readFrame()
		if err != nil {
			if errors.Is(err, ipc.ErrVersion) {
				cc.writeError(ipc.CodeVersion, err.Error())
			} else if errors.Is(err, ipc.ErrMalformed) {
				cc.writeError(ipc.CodeBadRequest, err.Error())
			}
			if errors.Is(err, ipc.ErrMalformed) || errors.Is(err, ipc.ErrVersion) {
				s.opt.Log.Debug("ipc: closing connection after a bad frame", "pid", cred.Pid, "err", err)
			}
			return
		}
		begin := time.Now()
		req, err := ipc.ParseRequest(t, payload)
		if err != nil {
			cc.writeError(ipc.CodeBadRequest, err.Error())
			s.opt.Log.Debug("ipc: closing connection after a bad payload", "pid", cred.Pid, "err", err)
			return
		}
		if err := s.handle(cc, req); err != nil {
			return
		}
		if s.opt.Observe != nil {
			s.opt.Observe(t, time.Since(begin).Seconds())
		}
	}
}

// readFrame returns the next whole frame; the header is checked as soon as
// it arrives, so an oversized length is refused before its payload is read.
func (cc *conn) readFrame() (ipc.Type, []byte, error) {
	if cc.start == cc.end {
		cc.start, cc.end = 0, 0
	}
	var first time.Time
	need := ipc.HeaderSize
	var hdr ipc.Header
	haveHdr := false
	for {
		avail := cc.end - cc.start
		if !haveHdr && avail >= ipc.HeaderSize {
			h, err := ipc.ParseHeader(cc.buf[cc.start : cc.start+ipc.HeaderSize])
			if err != nil {
				return 0, nil, err
			}
			hdr, haveHdr = h, true
			need = ipc.HeaderSize + h.Length
		}
		if haveHdr && avail >= need {
			p := cc.buf[cc.start+ipc.HeaderSize : cc.start+need]
			cc.start += need
			return hdr.Type, p, nil
		}
		if cc.start > 0 && cc.start+need > len(cc.buf) {
			copy(cc.buf, cc.buf[cc.start:cc.end])
			cc.end -= cc.start
			cc.start = 0
		}
		if avail == 0 {
			// Re-arm the idle deadline at most once a second: a busy
			// connection does not pay for a timer update per request.
			now := time.Now()
			if cc.partial || now.Sub(cc.idleArmed) > time.Second {
				if err := cc.c.SetReadDeadline(now.Add(IdleTimeout)); err != nil {
					return 0, nil, err
				}
				cc.idleArmed, cc.partial = now, false
			}
		} else if !cc.partial {
			if first.IsZero() {
				first = time.Now()
			}
			if err := cc.c.SetReadDeadline(first.Add(FrameTimeout)); err != nil {
				return 0, nil, err
			}
			cc.partial = true
		}
		n, err := cc.c.Read(cc.buf[cc.end:])
		if n > 0 {
			if avail == 0 {
				first = time.Now()
			}
			cc.end += n
			continue
		}
		if err != nil {
			return 0, nil, err
		}
	}
}

func (cc *conn) write(b []byte) error {
	cc.c.SetWriteDeadline(time.Now().Add(FrameTimeout))
	_, err := cc.c.Write(b)
	return err
}

func (cc *conn) writeError(code uint32, msg string) error {
	cc.out = ipc.AppendError(cc.out[:0], code, msg)
	return cc.write(cc.out)
}
