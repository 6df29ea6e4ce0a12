package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

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

func pingSequential(sock string, n int) (p50, p99 float64, err error) {
	lockThread()
	c, err := dialRaw(sock)
	if err != nil {
		return 0, 0, err
	}
	defer c.close()
	for i := 0; i < 1000; i++ {
		if err := c.ping(); err != nil {
			return 0, 0, err
		}
	}
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := c.ping(); err != nil {
			return 0, 0, err
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}

// pingPaired runs clients blocking clients, each on its own OS thread
// with a connection to each of two servers, pinging them in turn (which
// first alternating): both servers' pings are taken in the same moments,
// so a client thread preempted on 2 cores delays either server's pings
// alike. It returns each server's p50 and p99.
func pingPaired(a, b string, clients, per int) (p [2][2]float64, err error) {
	var mu sync.Mutex
	var all [2][]float64
	var firstErr error
	var wg, ready sync.WaitGroup
	start := make(chan struct{})
	fail := func(err error) {
		mu.Lock()
		firstErr = err
		mu.Unlock()
	}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			lockThread()
			var cs [2]*rawConn
			for k, sock := range []string{a, b} {
				c, err := dialRaw(sock)
				if err != nil {
					fail(err)
					ready.Done()
					return
				}
				defer c.close()
				for j := 0; j < 100; j++ {
					c.ping()
				}
				cs[k] = c
			}
			var lat [2][]float64
			ready.Done()
			<-start
			for j := 0; j < per; j++ {
				for n := 0; n < 2; n++ {
					k := (j + n) % 2
					t0 := time.Now()
					if err := cs[k].ping(); err != nil {
						fail(err)
						return
					}
					lat[k] = append(lat[k], float64(time.Since(t0).Nanoseconds())/1e3)
				}
			}
			mu.Lock()
			all[0], all[1] = append(all[0], lat[0]...), append(all[1], lat[1]...)
			mu.Unlock()
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()
	if firstErr != nil {
		return p, firstErr
	}
	for k := range all {
		p[k] = [2]float64{percentile(all[k], 50), percentile(all[k], 99)}
	}
	return p, nil
}
