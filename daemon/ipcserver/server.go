// Package ipcserver serves the IPC socket (docs/protocol.md): PING,
// ATTACH (ledger fds over SCM_RIGHTS), DETACH and STATUS, with the peer
// identified by SO_PEERCRED. A malformed frame closes that connection only.
package ipcserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"golang.org/x/sys/unix"
)

// Timeouts from docs/protocol.md.
const (
	IdleTimeout  = 30 * time.Second
	FrameTimeout = 5 * time.Second
)

// MaxConns bounds open IPC connections; more are closed at once (the
// interceptor only needs a connection while it attaches).
const MaxConns = 4096

// A connection's goroutine, once its connection closes, waits up to
// handlerIdle for the next one before it exits, and at most
// maxIdleHandlers wait: a goroutine that has served an ATTACH has the
// stack an ATTACH takes, where a new one starts small and has its stack
// copied twice on the way (an eighth of gpusliced's CPU per attach in an
// attach storm), and it keeps its buffers. When none waits, the accept
// loop starts a new goroutine, so a busy handler never delays a
// connection.
const (
	maxIdleHandlers = 16
	handlerIdle     = 10 * time.Second
)

// DefaultConnsPerUID bounds the connections one non-root uid holds, so
// that one user's idle connections never use up MaxConns for the others.
const DefaultConnsPerUID = 64

func (s *Server) refusedConn(uid uint32, perUID bool) {
	now := time.Now()
	s.mu.Lock()
	warn := now.Sub(s.lastRefusal) > 10*time.Second
	if warn {
		s.lastRefusal = now
	}
	s.mu.Unlock()
	if !warn {
		return
	}
	if perUID {
		s.opt.Log.Warn("ipc: a uid holds too many open connections; closing its new ones", "uid", uid, "max", s.opt.ConnsPerUID)
	} else {
		s.opt.Log.Warn("ipc: too many open connections; closing new ones", "max", MaxConns)
	}
}

// Options configure the server.
type Options struct {
	Token         string
	TokenRequired bool
	Log           *slog.Logger
	// ConnsPerUID bounds the open connections of one non-root uid
	// (0: DefaultConnsPerUID).
	ConnsPerUID int
	// Observe records one request's duration (seconds) by type; may be nil.
	Observe func(t ipc.Type, seconds float64)
}

// Server is the IPC server.
type Server struct {
	m     *session.Manager
	opt   Options
	token [32]byte

	mu     sync.Mutex
	ln     *net.UnixListener
	conns  map[*net.UnixConn]struct{}
	perUID map[uint32]int
	closed bool
	wg     sync.WaitGroup // connections being served

	next         chan accepted // to a waiting handler
	quit         chan struct{} // closed by Close: waiting handlers exit
	idleHandlers atomic.Int32
	liveHandlers atomic.Int32   // handler goroutines, serving or waiting
	handlers     sync.WaitGroup // the same, for Close

	lastRefusal time.Time
}

// New creates a server for m.
func New(m *session.Manager, opt Options) *Server {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.ConnsPerUID <= 0 {
		opt.ConnsPerUID = DefaultConnsPerUID
	}
	return &Server{m: m, opt: opt, token: sha256.Sum256([]byte(opt.Token)), conns: map[*net.UnixConn]struct{}{},
		perUID: map[uint32]int{}, next: make(chan accepted), quit: make(chan struct{})}
}

// accepted is a connection the accept loop admitted.
type accepted struct {
	c    *net.UnixConn
	cred *unix.Ucred
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				s.opt.Log.Warn("ipc accept", "err", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("ipc accept: %w", err)
		}
		// The peer is known from the kernel at once: a uid over its share
		// is closed before it costs a goroutine.
		cred, err := peerCred(c)
		if err != nil {
			s.opt.Log.Warn("ipc: SO_PEERCRED", "err", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		overUID := cred.Uid != 0 && s.perUID[cred.Uid] >= s.opt.ConnsPerUID
		if overUID || len(s.conns) >= MaxConns {
			s.mu.Unlock()
			c.Close()
			s.refusedConn(cred.Uid, overUID)
			continue
		}
		s.conns[c] = struct{}{}
		s.perUID[cred.Uid]++
		s.wg.Add(1)
		a := accepted{c, cred}
		select {
		case s.next <- a:
		default:
			s.handlers.Add(1)
			s.liveHandlers.Add(1)
			go s.handler(a)
		}
		s.mu.Unlock()
	}
}

// handler serves a, then each connection handed to it while it waits
// (maxIdleHandlers, handlerIdle).
func (s *Server) handler(a accepted) {
	defer s.handlers.Done()
	defer s.liveHandlers.Add(-1)
	bufs := connBufs{buf: make([]byte, ipc.HeaderSize+ipc.MaxPayload), out: make([]byte, 0, 256)}
	var idle *time.Timer
	for {
		s.serveConn(a.c, a.cred, &bufs)
		if s.idleHandlers.Add(1) > maxIdleHandlers {
			s.idleHandlers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(handlerIdle)
		} else {
			idle.Reset(handlerIdle)
		}
		select {
		case a = <-s.next:
			s.idleHandlers.Add(-1)
			idle.Stop()
		case <-idle.C:
			s.idleHandlers.Add(-1)
			return
		case <-s.quit:
			s.idleHandlers.Add(-1)
			return
		}
	}
}

// Close stops accepting, closes every connection and waits for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	if !already {
		close(s.quit)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.handlers.Wait()
}

// connBufs are a handler's buffers, used by one connection at a time.
type connBufs struct {
	buf []byte // HeaderSize+MaxPayload
	out []byte
}

// maxKeptOut bounds the reply buffer a handler keeps between connections
// (a STATUS reply may have grown it).
const maxKeptOut = 64 << 10

type conn struct {
	c       *net.UnixConn
	cred    *unix.Ucred
	buf     []byte // HeaderSize+MaxPayload
	start   int    // unread data is buf[start:end]
	end     int
	out     []byte
	session string // session attached on this connection

	idleArmed time.Time // when the idle deadline was last set
	partial   bool      // the frame deadline (not the idle one) is armed
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return nil, err
	}
	return cred, cerr
}

func (s *Server) serveConn(c *net.UnixConn, cred *unix.Ucred, bufs *connBufs) {
	cc := &conn{c: c, cred: cred, buf: bufs.buf, out: bufs.out[:0]}
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
	a, err := s.m.Attach(id, cc.cred.Uid, uint32(cc.cred.Pid))
	if err != nil {
		s.opt.Log.Info("ipc: attach refused", "session", id, "pid", cc.cred.Pid, "uid", cc.cred.Uid, "err", err)
		return cc.writeError(codeFor(err), err.Error())
	}
	defer a.Close()
	cc.session = a.Session
	cc.out = ipc.AppendAttachOK(cc.out[:0], uint32(a.Slot), uint32(a.NGPUs), a.Generation)
	oob := unix.UnixRights(a.Limits, a.Counters)
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
