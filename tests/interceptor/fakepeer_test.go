package interceptor

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The fake peer: a unix socket server that reads one ATTACH request per
// connection and answers it however the test says, wrongly on purpose. It
// tests the interceptor's reply parser, not the daemon.

const (
	ipcMagic    = 0x50495347
	typeAttach  = 3
	typeAttachO = 4
	typePong    = 2
	typeError   = 9
)

type peer struct {
	sock string
	ln   *net.UnixListener
	mu   sync.Mutex
	reqs [][]byte // payloads of the ATTACH requests received
	bad  []string // requests that were not well-formed ATTACH frames
}

type answer func(c *net.UnixConn)

func startPeer(t testing.TB, ans answer) *peer {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gsp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &peer{sock: filepath.Join(dir, "ipc.sock")}
	p.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: p.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { p.ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := p.ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				hdr := make([]byte, 12)
				if _, err := io.ReadFull(c, hdr); err != nil {
					p.note(nil, "short header")
					return
				}
				le := binary.LittleEndian
				n := le.Uint32(hdr[8:])
				if le.Uint32(hdr) != ipcMagic || le.Uint16(hdr[4:]) != 1 || le.Uint16(hdr[6:]) != typeAttach || n > 4096 {
					p.note(nil, "bad header")
					return
				}
				pay := make([]byte, n)
				if _, err := io.ReadFull(c, pay); err != nil {
					p.note(nil, "short payload")
					return
				}
				p.note(pay, "")
				ans(c)
			}()
		}
	}()
	return p
}

func (p *peer) note(pay []byte, bad string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bad != "" {
		p.bad = append(p.bad, bad)
	} else {
		p.reqs = append(p.reqs, pay)
	}
}

func frame(typ uint16, length uint32, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, ipcMagic)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = binary.LittleEndian.AppendUint32(b, length)
	return append(b, payload...)
}

func attachOK(slot, ngpus uint32) []byte {
	p := binary.LittleEndian.AppendUint32(nil, slot)
	p = binary.LittleEndian.AppendUint32(p, ngpus)
	p = binary.LittleEndian.AppendUint64(p, 1)
	return frame(typeAttachO, uint32(len(p)), p)
}

// attachOKCompute is ATTACH_OK with the compute page's slot (cslot,
// 0xFFFFFFFF: none), as gpusliced answers the library's ATTACH.
func attachOKCompute(slot, ngpus, cslot uint32) []byte {
	p := attachOK(slot, ngpus)[12:]
	p = binary.LittleEndian.AppendUint32(p, cslot)
	p = binary.LittleEndian.AppendUint32(p, 0)
	p = binary.LittleEndian.AppendUint64(p, 1)
	return frame(typeAttachO, uint32(len(p)), p)
}

func errorFrame(code uint32, msg string) []byte {
	p := binary.LittleEndian.AppendUint32(nil, code)
	p = binary.LittleEndian.AppendUint16(p, uint16(len(msg)))
	p = append(p, msg...)
	return frame(typeError, uint32(len(p)), p)
}

func send(c *net.UnixConn, b []byte, files ...*os.File) {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	c.WriteMsgUnix(b, oob, nil)
}

func sendRaw(b []byte) answer { return func(c *net.UnixConn) { c.Write(b) } }

func sendWith(b []byte, files func() []*os.File) answer {
	return func(c *net.UnixConn) { send(c, b, files()...) }
}

// tempFile is a file of size bytes (zeros), opened with flag.
func tempFile(t *testing.T, size int, flag int) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// deviceUUID asks fakecuda for the UUID of device 0 (no interceptor).
func deviceUUID(t testing.TB, env []string) string {
	t.Helper()
	r := probe.Run(t, env, probe.Bin(t, "gs_probe"), "uuid:0")
	u := r.Find(t, "uuid", 0)
	if u.Get("rc") != "0" || !strings.HasPrefix(u.Get("uuid"), "GPU-") {
		t.Fatalf("uuid: %s", u.Line)
	}
	return u.Get("uuid")
}

// newLedger creates a ledger for session with one GPU and returns it.
func newLedger(t testing.TB, session, uuid string, limit uint64, nslots int) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Create(t.TempDir(), session, []ledger.GPU{{UUID: uuid, Limit: limit, Physical: 80 << 30}}, nslots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// every slot handed out, as gpusliced does before it names one in a
	// reply (its figures read the slots it handed out)
	for i := 0; i < nslots; i++ {
		if _, _, err := l.Claim(uint32(1000000+i), 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestMalformedReplies(t *testing.T) {
	env := fakeEnv(t, "80GiB")
	uuid := deviceUUID(t, env)
	const session = "peer1"
	goodFiles := func() []*os.File {
		l := newLedger(t, session, uuid, 1<<30, 4)
		lim, ctr := l.Files()
		return []*os.File{lim, ctr}
	}
	pipeFiles := func() []*os.File {
		r1, w1, _ := os.Pipe()
		r2, w2, _ := os.Pipe()
		t.Cleanup(func() { r1.Close(); w1.Close(); r2.Close(); w2.Close() })
		return []*os.File{r1, w2}
	}
	tests := []struct {
		name   string
		ans    answer
		reason string // substring of the stderr reason
	}{
		{"bad magic", sendRaw(append([]byte{1, 2, 3, 4}, attachOK(0, 1)[4:]...)), "bad magic"},
		{"bad version", sendRaw(func() []byte { b := attachOK(0, 1); b[4] = 9; return b }()), "protocol version 9"},
		{"short frame", sendRaw(attachOK(0, 1)[:17]), "in the middle of a reply"},
		{"short header", sendRaw([]byte{0x47, 0x53}), "in the middle of a reply"},
		{"oversized length", sendRaw(frame(typeAttachO, 5000, make([]byte, 64))), "payload length 5000"},
		{"attach_ok without fds", sendRaw(attachOK(0, 1)), "0 file descriptors"},
		{"one fd", sendWith(attachOK(0, 1), func() []*os.File { return goodFiles()[:1] }), "1 file descriptors"},
		{"three fds", sendWith(attachOK(0, 1), func() []*os.File {
			f := goodFiles()
			return append(f, f[0])
		}), "3 file descriptors"},
		{"long attach_ok payload", sendWith(frame(typeAttachO, 20, append(attachOK(0, 1)[12:], 0, 0, 0, 0)), goodFiles), "payload 20 bytes"},
		{"compute slot without the page's fd", sendWith(attachOKCompute(0, 1, 3), goodFiles), "2 file descriptors"},
		{"no compute slot with a third fd", sendWith(attachOKCompute(0, 1, 0xFFFFFFFF), func() []*os.File {
			f := goodFiles()
			return append(f, f[0])
		}), "3 file descriptors"},
		{"unexpected type", sendRaw(frame(typePong, 0, nil)), "unexpected frame type 2"},
		{"error frame", sendRaw(errorFrame(3, "uid 1000 does not own session peer1")), "not permitted: uid 1000 does not own session peer1"},
		{"error frame with bad length", sendRaw(frame(typeError, 8, []byte{3, 0, 0, 0, 9, 0, 'x', 'y'})), "malformed error reply"},
		{"undersized ledger files", sendWith(attachOK(0, 1), func() []*os.File {
			return []*os.File{tempFile(t, 100, os.O_RDONLY), tempFile(t, 100, os.O_RDWR)}
		}), "limits file is not a 4096-byte regular file"},
		{"undersized counters file", sendWith(attachOK(0, 1), func() []*os.File {
			return []*os.File{goodFiles()[0], tempFile(t, 4096, os.O_RDWR)}
		}), "counters file has a bad size"},
		{"zeroed limits file", sendWith(attachOK(0, 1), func() []*os.File {
			return []*os.File{tempFile(t, 4096, os.O_RDONLY), goodFiles()[1]}
		}), "bad magic/version"},
		{"pipes instead of files", sendWith(attachOK(0, 1), pipeFiles), "regular file"},
		{"slot out of range", sendWith(attachOK(9, 1), goodFiles), "slot 9 out of range"},
		{"gpu count mismatch", sendWith(attachOK(0, 2), goodFiles), "names 1 GPUs, reply 2"},
		{"too many gpus", sendWith(attachOK(0, 17), goodFiles), "17 GPUs"},
		{"closes without answering", func(c *net.UnixConn) {}, "connection closed"},
		// reads to the end (the library sends nothing after its request)
		// and keeps the connection open past the library's 2 s window
		{"never answers", func(c *net.UnixConn) { io.Copy(io.Discard, c); time.Sleep(3 * time.Second) }, "no reply"},
	}
	// open descriptors of a process that never attaches: the baseline
	base := probe.Run(t, preload(t, env), probe.Bin(t, "gs_probe"), "dev:0", "alloc:64M", "fds")
	wantFDs := base.Find(t, "fds", 0).Int(t, "n")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startPeer(t, tc.ans)
			r := probe.Run(t, preload(t, env, "GPUSLICE_SESSION="+session, "GPUSLICE_IPC_SOCK="+p.sock),
				probe.Bin(t, "gs_probe"), "dev:0", "alloc:64M", "meminfo", "fds")
			if r.Err != nil {
				t.Fatalf("probe exited with %v (crash?)\n%s\n%s", r.Err, r.Stdout, r.Stderr)
			}
			if rc := r.Find(t, "alloc", 0).Get("rc"); rc != "2" {
				t.Errorf("alloc rc=%s, want 2 (fail closed)", rc)
			}
			if mi := r.Find(t, "meminfo", 0); mi.Get("free") != "0" {
				t.Errorf("meminfo %s, want free=0", mi.Line)
			}
			if n := r.Find(t, "fds", 0).Int(t, "n"); n != wantFDs {
				t.Errorf("%d descriptors open after the failed attach, %d without a session: a leak", n, wantFDs)
			}
			reason := wantFailClosed(t, r, session, p.sock)
			if !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", reason, tc.reason)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.bad) > 0 || len(p.reqs) == 0 {
				t.Errorf("requests: %d good, bad: %v", len(p.reqs), p.bad)
			}
		})
	}
}

// A correct reply from the fake peer is accepted: the positive control of
// the test above. The request carries the session and the token; charges
// land in the ledger that was passed.
func TestWellFormedReplyFromPeer(t *testing.T) {
	env := fakeEnv(t, "80GiB")
	uuid := deviceUUID(t, env)
	const session = "peer2"
	l := newLedger(t, session, uuid, 1<<30, 4)
	lim, ctr := l.Files()
	p := startPeer(t, sendWith(attachOK(2, 1), func() []*os.File { return []*os.File{lim, ctr} }))
	r := probe.Run(t, preload(t, env, "GPUSLICE_SESSION="+session, "GPUSLICE_IPC_SOCK="+p.sock,
		"GPUSLICE_IPC_TOKEN=s3cret"), probe.Bin(t, "gs_probe"),
		"dev:0", "alloc:512M", "alloc:600M", "meminfo", "meminfonull", "totalmem:0", "pitch:1000:1000", "free", "free", "meminfo")
	if r.Err != nil || len(r.StderrLines()) != 1 || !refusalLine.MatchString(r.StderrLines()[0]) {
		// the one refusal below says so on stderr, nothing else does
		t.Fatalf("probe: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	if rc := r.Find(t, "alloc", 0).Get("rc"); rc != "0" {
		t.Errorf("512M alloc rc=%s, want 0", rc)
	}
	if rc := r.Find(t, "alloc", 1).Get("rc"); rc != "2" {
		t.Errorf("600M alloc over a 1 GiB quota with 512M held: rc=%s, want 2", rc)
	}
	mi := r.Find(t, "meminfo", 0)
	if mi.Uint(t, "total") != 1<<30 || mi.Uint(t, "free") != 512<<20 {
		t.Errorf("meminfo %s, want total=1GiB free=512MiB", mi.Line)
	}
	if mn := r.Find(t, "meminfonull", 0); mn.Get("rc1") != "0" || mn.Get("rc2") != "0" ||
		mn.Uint(t, "total") != 1<<30 || mn.Uint(t, "free") != 512<<20 {
		t.Errorf("meminfo with NULL out-pointers: %s", mn.Line)
	}
	if tm := r.Find(t, "totalmem", 0); tm.Uint(t, "bytes") != 1<<30 {
		t.Errorf("totalmem %s, want 1 GiB", tm.Line)
	}
	pitch := r.Find(t, "pitch", 0)
	if pitch.Get("rc") != "0" {
		t.Fatalf("pitch: %s", pitch.Line)
	}
	if mi := r.Find(t, "meminfo", 1); mi.Uint(t, "free") != 1<<30 {
		t.Errorf("after freeing everything: %s, want free=1GiB", mi.Line)
	}
	wantPeak := uint64(512<<20) + pitch.Uint(t, "bytes")
	if l.Used(0) != 0 || l.Peak(0) != wantPeak || l.Denied(0) != 1 {
		t.Errorf("ledger used=%d peak=%d denied=%d, want 0, %d, 1", l.Used(0), l.Peak(0), l.Denied(0), wantPeak)
	}
	if s := l.Slot(2); s.Used[0] != 0 {
		t.Errorf("slot 2 holds %d bytes after the frees", s.Used[0])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) != 1 {
		t.Fatalf("%d ATTACH requests, want 1 (bad: %v)", len(p.reqs), p.bad)
	}
	want := binary.LittleEndian.AppendUint16(nil, uint16(len(session)))
	want = append(want, session...)
	want = binary.LittleEndian.AppendUint16(want, 6)
	want = append(want, "s3cret"...)
	want = binary.LittleEndian.AppendUint32(want, 1) // flags: hand over the compute page
	if string(p.reqs[0]) != string(want) {
		t.Errorf("ATTACH payload %q, want %q", p.reqs[0], want)
	}
}

// FuzzAttachReply: whatever the peer answers (with 0..3 descriptors of a
// real ledger), the process never crashes, allocations either succeed
// (a well-formed reply) or fail closed, and at most one line is written.
// `go test` runs the seeds; `go test -fuzz FuzzAttachReply` explores.
func FuzzAttachReply(f *testing.F) {
	env := fakeEnv(f, "80GiB")
	uuid := deviceUUID(f, env)
	const session = "fuzz1"
	f.Add(attachOK(0, 1), uint8(2))
	f.Add(attachOK(3, 1), uint8(2))
	f.Add(attachOK(0, 1), uint8(1))
	f.Add(errorFrame(2, "unknown session fuzz1"), uint8(0))
	f.Add(errorFrame(3, "x"), uint8(2))
	f.Add(frame(typeAttachO, 4096, make([]byte, 4096)), uint8(2))
	f.Add(frame(typeAttachO, 0xFFFFFFFF, nil), uint8(2))
	f.Add(frame(typeError, 6, []byte{1, 0, 0, 0, 0xFF, 0xFF}), uint8(0))
	f.Add([]byte("GSIP"), uint8(3))
	f.Fuzz(func(t *testing.T, reply []byte, nfds uint8) {
		if len(reply) == 0 {
			t.Skip("an empty reply is a closed connection: retried for 2 s, covered above")
		}
		n := int(nfds % 4)
		l := newLedger(t, session, uuid, 1<<30, 4)
		lim, ctr := l.Files()
		files := []*os.File{lim, ctr, lim}[:n]
		p := startPeer(t, sendWith(reply, func() []*os.File { return files }))
		r := probe.Run(t, preload(t, env, "GPUSLICE_SESSION="+session, "GPUSLICE_IPC_SOCK="+p.sock),
			probe.Bin(t, "gs_probe"), "dev:0", "alloc:64M", "free")
		if r.Err != nil {
			t.Fatalf("probe exited with %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		switch rc := r.Find(t, "alloc", 0).Get("rc"); rc {
		case "0":
			if r.Stderr != "" {
				t.Errorf("admitted, yet stderr: %q", r.Stderr)
			}
			if l.Used(0) != 0 || l.Peak(0) != 64<<20 {
				t.Errorf("admitted: ledger used %d peak %d", l.Used(0), l.Peak(0))
			}
		case "2":
			wantFailClosed(t, r, session, p.sock)
		default:
			t.Errorf("alloc rc=%s", rc)
		}
	})
}
