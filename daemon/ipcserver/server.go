// Package ipcserver serves the IPC socket (docs/protocol.md): PING,
// ATTACH (ledger fds over SCM_RIGHTS), DETACH, STATUS, VIEW and SHORT, with the peer
// identified by SO_PEERCRED. A malformed frame closes that connection only.
package ipcserver

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/ipc"
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

// A connection's goroutine (a worker), once its connection closes, waits
// up to workerIdle for the next one before it exits, and at most
// maxIdleWorkers wait: a goroutine that has served an ATTACH has the
// stack an ATTACH takes, where a new one starts small and has its stack
// copied twice on the way (an eighth of gpusliced's CPU per attach in an
// attach storm), and it keeps its buffers. When none waits, the accept
// loop starts a new goroutine, so a busy worker never delays a
// connection.
const (
	maxIdleWorkers = 16
	workerIdle     = 10 * time.Second
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
	// Short asks the audit for a pass out of turn: called for the SHORT
	// messages of attached processes, within their rate limits
	// (short.go). May be nil.
	Short func()
	// Free reads the device memory the driver has free on GPU i
	// (inventory index), to tell a refusal that is real (short.go). May
	// be nil: every SHORT is then limited per uid.
	Free func(i int) (uint64, error)
	// Compute, when set, gives a session's slot on the compute page, the
	// slot's generation and a read-only fd of the page, which ATTACH_OK
	// hands to a client that asks (ipc.AttachCompute). ok false: none.
	Compute func(session string) (fd int, slot uint32, gen uint64, ok bool)
}

// Server is the IPC server.
type Server struct {
	m     *session.Manager
	opt   Options
	token [32]byte
	// pidfds: the kernel answers SO_PEERPIDFD (peer.go).
	pidfds bool

	mu     sync.Mutex
	ln     *net.UnixListener
	conns  map[*net.UnixConn]struct{}
	perUID map[uint32]int
	closed bool
	wg     sync.WaitGroup // connections being served

	next        chan accepted // to a waiting worker
	quit        chan struct{} // closed by Close: waiting workers exit
	idleWorkers atomic.Int32
	liveWorkers atomic.Int32   // worker goroutines, serving or waiting
	workers     sync.WaitGroup // the same, for Close

	lastRefusal time.Time

	short  shortLimiter     // SHORT's rate limits (shortlimit.go)
	freeMu sync.Mutex       // guards free
	free   map[int]freeRead // the GPUs' free memory as shortReal last read it
}

// New creates a server for m.
func New(m *session.Manager, opt Options) *Server {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.ConnsPerUID <= 0 {
		opt.ConnsPerUID = DefaultConnsPerUID
	}
	return &Server{m: m, opt: opt, token: sha256.Sum256([]byte(opt.Token)), pidfds: peerPidfdWorks(), conns: map[*net.UnixConn]struct{}{},
		perUID: map[uint32]int{}, next: make(chan accepted), quit: make(chan struct{})}
}

// accepted is a connection the accept loop admitted.
type accepted struct {
	c     *net.UnixConn
	cred  *unix.Ucred
	start uint64 // the peer's start time, read only where SO_PEERPIDFD is missing (peer.go)
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
		a := accepted{c: c, cred: cred}
		if !s.pidfds {
			a.start, _ = reclaim.StartTime(uint32(cred.Pid)) // 0 (unknown) if it has gone
		}
		select {
		case s.next <- a:
		default:
			s.workers.Add(1)
			s.liveWorkers.Add(1)
			go s.worker(a)
		}
		s.mu.Unlock()
	}
}

// worker serves a, then each connection handed to it while it waits
// (maxIdleWorkers, workerIdle).
func (s *Server) worker(a accepted) {
	defer s.workers.Done()
	defer s.liveWorkers.Add(-1)
	bufs := connBufs{buf: make([]byte, ipc.HeaderSize+ipc.MaxPayload), out: make([]byte, 0, 256)}
	var idle *time.Timer
	for {
		s.serveConn(a, &bufs)
		if s.idleWorkers.Add(1) > maxIdleWorkers {
			s.idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case a = <-s.next:
			s.idleWorkers.Add(-1)
			idle.Stop()
		case <-idle.C:
			s.idleWorkers.Add(-1)
			return
		case <-s.quit:
			s.idleWorkers.Add(-1)
			return
		}
	}
}

// Close stops accepting, closes every connection and waits for the workers.
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
	s.workers.Wait()
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
