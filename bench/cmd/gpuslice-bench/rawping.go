package main

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"
)

// rawConn is a blocking unix-socket client using plain syscalls, the way
// the interceptor (C) talks to the daemon: no Go netpoller on the client
// side, so the figure is the daemon's round trip, not the Go runtime's.
type rawConn struct {
	fd  int
	req []byte
	buf []byte
}

func dialRaw(path string) (*rawConn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect %s: %w", path, err)
	}
	return &rawConn{fd: fd, req: ipc.AppendFrame(nil, ipc.TypePing, []byte("ping")),
		buf: make([]byte, ipc.HeaderSize+ipc.MaxPayload)}, nil
}

func (c *rawConn) close() { unix.Close(c.fd) }

// ping sends one PING and reads the whole PONG with blocking syscalls.
func (c *rawConn) ping() error {
	if _, err := unix.Write(c.fd, c.req); err != nil {
		return err
	}
	want := len(c.req) // PONG echoes the payload: same size
	got := 0
	for got < want {
		n, err := unix.Read(c.fd, c.buf[got:want])
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if n == 0 {
			return errors.New("connection closed")
		}
		got += n
	}
	h, err := ipc.ParseHeader(c.buf[:ipc.HeaderSize])
	if err != nil || h.Type != ipc.TypePong {
		return fmt.Errorf("unexpected reply %v %v", h.Type, err)
	}
	return nil
}

// lockThread pins the calling goroutine to its OS thread so that blocking
// reads behave like a C client's.
func lockThread() { runtime.LockOSThread() }
