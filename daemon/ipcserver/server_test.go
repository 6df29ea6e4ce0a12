package ipcserver

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/gpu"
	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/daemon/store"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"
)

func startServer(t *testing.T) (string, *session.Manager) {
	t.Helper()
	sock, m, _ := startServerSrv(t)
	return sock, m
}

// startServerSrv serves a session manager of its own on a socket; with
// opt set, opt adjusts the server's Options (its Log is set already).
func startServerSrv(t *testing.T, opt ...func(*Options)) (string, *session.Manager, *Server) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gsipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "ledgers"), 0o700)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gpus := []gpu.GPU{{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Physical: 1 << 34}}
	m, err := session.New(session.Options{LedgerDir: filepath.Join(dir, "ledgers"), Slots: 4, Overcommit: 1,
		DefaultTTL: time.Hour, Log: log}, gpus, st, session.Events{})
	if err != nil {
		t.Fatal(err)
	}
	go m.Watcher().Run()
	sock := filepath.Join(dir, "ipc.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Log: log}
	for _, f := range opt {
		f(&o)
	}
	srv := New(m, o)
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		m.Watcher().Close()
		m.Close()
		st.Close()
	})
	return sock, m, srv
}

// rawPing sends PINGs with plain syscalls so that only the server allocates.
func rawPings(t *testing.T, sock string, n int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	req := ipc.AppendFrame(nil, ipc.TypePing, []byte("abcd"))
	buf := make([]byte, len(req))
	for i := 0; i < n; i++ {
		if _, err := unix.Write(fd, req); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(buf); {
			k, err := unix.Read(fd, buf[got:])
			if err != nil || k == 0 {
				t.Fatalf("read: %v", err)
			}
			got += k
		}
	}
}

// TestPingAllocations guards the allocation-light request path: the
// server's steady-state cost per PING is well under one heap allocation.
func TestPingAllocations(t *testing.T) {
	sock, _ := startServer(t)
	rawPings(t, sock, 100) // warm up: connection set-up allocates
	const n = 5000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rawPings(t, sock, n)
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.3f allocations per ping (server and test together)", per)
	if per > 0.5 {
		t.Fatalf("%.2f allocations per PING; the request path should not allocate", per)
	}
}

func TestStatusFitsAFrame(t *testing.T) {
	sock, m := startServer(t)
	if _, _, err := m.Create(api.SessionRequest{ID: "s", QuotaBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.Status("s", "")
	if err != nil || len(raw) == 0 || len(raw) > ipc.MaxPayload {
		t.Fatalf("STATUS = %d bytes, %v", len(raw), err)
	}
	if _, err := c.Status("missing", ""); err == nil {
		t.Fatal("STATUS of a missing session succeeded")
	}
}

// waitFor polls cond for up to 10 s: whether it ever held.
func waitFor(cond func() bool) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestWorkerServesTheNextConnection: one connection after another is
// served by one goroutine, which waits for the next.
func TestWorkerServesTheNextConnection(t *testing.T) {
	sock, _, srv := startServerSrv(t)
	for i := 0; i < 20; i++ {
		rawPings(t, sock, 1)
		if !waitFor(func() bool { return srv.idleWorkers.Load() == 1 }) {
			t.Fatalf("connection %d: %d workers wait, want 1", i, srv.idleWorkers.Load())
		}
	}
	if n := srv.liveWorkers.Load(); n != 1 {
		t.Fatalf("%d workers after 20 connections one at a time, want 1", n)
	}
}

// TestBusyWorkersDelayNoConnection: connections held open by a client
// that sends nothing keep their workers; a new connection gets a new one
// and is answered. Once they close, at most maxIdleWorkers stay to wait,
// and Close ends them all.
func TestBusyWorkersDelayNoConnection(t *testing.T) {
	sock, _, srv := startServerSrv(t)
	const held = maxIdleWorkers + 8
	var fds []int
	for i := 0; i < held; i++ {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(func() bool { return srv.liveWorkers.Load() == held }) {
		t.Fatalf("%d workers for %d open connections", srv.liveWorkers.Load(), held)
	}
	rawPings(t, sock, 3)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if !waitFor(func() bool {
		return srv.liveWorkers.Load() == maxIdleWorkers && srv.idleWorkers.Load() == maxIdleWorkers
	}) {
		t.Fatalf("after every connection closed: %d workers, %d waiting; want %d", srv.liveWorkers.Load(), srv.idleWorkers.Load(), maxIdleWorkers)
	}
	srv.Close()
	if n := srv.liveWorkers.Load(); n != 0 {
		t.Fatalf("%d workers still running after Close", n)
	}
}

// Without SO_PEERPIDFD (kernels before 6.5) an ATTACH is refused when the
// process holding the connection's pid did not start when the one that
// connected did (its pid was reused); the start time read at accept
// decides. (tests/security/pid_reuse_attach_test.go reuses a pid for real,
// on a kernel with SO_PEERPIDFD.)
func TestPeerCheckByStartTime(t *testing.T) {
	s := &Server{pidfds: false}
	cc := &conn{cred: &unix.Ucred{Pid: 4242}, peerStart: 1000}
	if err := s.peerCheck(cc)(1000); err != nil {
		t.Fatalf("same start time: %v", err)
	}
	if err := s.peerCheck(cc)(1001); !errors.Is(err, session.ErrPeerGone) {
		t.Fatalf("another start time: %v, want ErrPeerGone", err)
	}
	cc.peerStart = 0 // gone before accept read it: nothing to compare
	if err := s.peerCheck(cc)(1001); err != nil {
		t.Fatalf("unknown start time: %v", err)
	}
}
