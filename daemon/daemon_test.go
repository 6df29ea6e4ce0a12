package daemon_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestAdmission(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB,40GiB"})
	gpus, err := d.Client().GPUs(ctx(t))
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs = %v, %v", gpus, err)
	}
	uuid1 := gpus[1].UUID
	steps := []struct {
		name    string
		req     client.SessionRequest
		wantErr error
		wantMsg string
	}{
		{"fits both", client.SessionRequest{ID: "a", UID: 1000, QuotaBytes: 30 * giB}, nil, ""},
		{"too big for gpu1", client.SessionRequest{ID: "b", UID: 1000, QuotaBytes: 20 * giB}, client.ErrQuotaExceeded, "10GiB free"},
		{"gpu0 only by index", client.SessionRequest{ID: "c", UID: 1000, QuotaBytes: 50 * giB, GPUs: []string{"0"}}, nil, ""},
		{"gpu0 full", client.SessionRequest{ID: "d", UID: 1000, QuotaBytes: 1, GPUs: []string{"0"}}, client.ErrQuotaExceeded, "0B free"},
		{"gpu1 by uuid, exact fit", client.SessionRequest{ID: "e", UID: 1000, Quotas: map[string]uint64{uuid1: 10 * giB}}, nil, ""},
		{"unknown gpu", client.SessionRequest{ID: "f", UID: 1000, QuotaBytes: 1, GPUs: []string{"GPU-nope"}}, client.ErrBadRequest, "unknown GPU"},
		{"bad id", client.SessionRequest{ID: "../x", UID: 1000, QuotaBytes: 1}, client.ErrBadRequest, "session id"},
		{"long id", client.SessionRequest{ID: strings.Repeat("x", 64), UID: 1000, QuotaBytes: 1}, client.ErrBadRequest, "session id"},
		{"no quota", client.SessionRequest{ID: "g", UID: 1000}, client.ErrBadRequest, "no quota"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			_, err := d.Client().CreateSession(ctx(t), st.req)
			if st.wantErr == nil {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				return
			}
			if !errors.Is(err, st.wantErr) {
				t.Fatalf("create = %v, want %v", err, st.wantErr)
			}
			if !strings.Contains(err.Error(), st.wantMsg) {
				t.Fatalf("error %q does not say %q", err, st.wantMsg)
			}
		})
	}
	gpus, _ = d.Client().GPUs(ctx(t))
	if gpus[0].CommittedBytes != 80*giB || gpus[1].CommittedBytes != 40*giB || gpus[0].Sessions != 2 {
		t.Fatalf("committed after admission: %+v", gpus)
	}
	// Releasing frees room.
	if _, err := d.Client().DeleteSession(ctx(t), "c"); err != nil {
		t.Fatal(err)
	}
	create(t, d, client.SessionRequest{ID: "d", UID: 1000, QuotaBytes: 50 * giB, GPUs: []string{"0"}})
}

func TestOvercommit(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "10GiB", Overcommit: 1.5})
	create(t, d, client.SessionRequest{ID: "a", UID: 1, QuotaBytes: 10 * giB})
	create(t, d, client.SessionRequest{ID: "b", UID: 1, QuotaBytes: 5 * giB})
	if _, err := d.Client().CreateSession(ctx(t), client.SessionRequest{ID: "c", UID: 1, QuotaBytes: 1}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("create past 15GiB = %v", err)
	}
}

func TestCreateIdempotentConflictNotFound(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	c := d.Client()
	req := client.SessionRequest{ID: "1234", UID: 1000, QuotaBytes: 8 * giB}
	s1 := create(t, d, req)
	s2 := create(t, d, req)
	if !s1.Created.Equal(s2.Created) {
		t.Fatalf("idempotent create returned a new session: %v vs %v", s1.Created, s2.Created)
	}
	tests := []struct {
		name string
		req  client.SessionRequest
	}{
		{"other owner", client.SessionRequest{ID: "1234", UID: 1001, QuotaBytes: 8 * giB}},
		{"other quota", client.SessionRequest{ID: "1234", UID: 1000, QuotaBytes: 4 * giB}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.CreateSession(ctx(t), tc.req); !errors.Is(err, client.ErrConflict) {
				t.Fatalf("create = %v, want ErrConflict", err)
			}
		})
	}
	list, err := c.ListSessions(ctx(t))
	if err != nil || len(list) != 1 || list[0].ID != "1234" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	rep, err := c.DeleteSession(ctx(t), "1234")
	if err != nil || rep.ID != "1234" || len(rep.GPUs) != 1 || rep.GPUs[0].LimitBytes != 8*giB {
		t.Fatalf("delete = %+v, %v", rep, err)
	}
	for _, f := range []func() error{
		func() error { _, err := c.GetSession(ctx(t), "1234"); return err },
		func() error { _, err := c.DeleteSession(ctx(t), "1234"); return err },
		func() error { _, err := c.PatchSession(ctx(t), "1234", client.PatchRequest{}); return err },
		func() error { _, err := c.History(ctx(t), "nope"); return err },
	} {
		if err := f(); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("after delete: %v, want ErrNotFound", err)
		}
	}
	h, err := c.History(ctx(t), "1234")
	if err != nil || h.Reason != "deleted" {
		t.Fatalf("history = %+v, %v", h, err)
	}
	// Deleted ledgers are gone from the runtime dir.
	if entries, _ := os.ReadDir(d.LedgerDir); len(entries) != 0 {
		t.Fatalf("ledger dir not empty after delete: %v", entries)
	}
}

func TestUnavailable(t *testing.T) {
	c := client.New(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := c.Health(ctx(t)); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Health on a missing socket = %v, want ErrUnavailable", err)
	}
}

func TestAttachPatchLive(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
	create(t, d, client.SessionRequest{ID: "live", UID: 1000, QuotaBytes: 8 * giB})
	conn, err := ipc.Dial(d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a, err := conn.Attach("live", "") // this test runs as root: allowed
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.NGPUs != 2 {
		t.Fatalf("ngpus %d", a.NGPUs)
	}
	// The limits fd is read-only, the counters fd read-write.
	for _, tc := range []struct {
		f    *os.File
		mode int
	}{{a.Limits, os.O_RDONLY}, {a.Counters, os.O_RDWR}} {
		fl, err := fcntlFlags(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if fl&0o3 != tc.mode {
			t.Fatalf("fd access mode %#o, want %#o", fl&0o3, tc.mode)
		}
	}
	l, err := ledger.Map(a.Limits, a.Counters)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Limit(0) != 8*giB || l.Session() != "live" {
		t.Fatalf("ledger limit %d session %q", l.Limit(0), l.Session())
	}
	if st := l.Slot(int(a.Slot)); st.State != ledger.SlotAttached || st.PID != uint32(os.Getpid()) {
		t.Fatalf("slot %+v", st)
	}
	// Attaching again returns the same slot.
	a2, err := conn.Attach("live", "")
	if err != nil || a2.Slot != a.Slot {
		t.Fatalf("re-attach slot %v, %v", a2, err)
	}
	a2.Close()

	gen := l.Generation()
	q := 2 * giB
	s, err := d.Client().PatchSession(ctx(t), "live", client.PatchRequest{QuotaBytes: &q})
	if err != nil {
		t.Fatal(err)
	}
	if s.GPUs[0].LimitBytes != q || l.Limit(0) != q || l.Limit(1) != q || l.Generation() <= gen {
		t.Fatalf("after PATCH: api %d ledger %d/%d gen %d->%d", s.GPUs[0].LimitBytes, l.Limit(0), l.Limit(1), gen, l.Generation())
	}
	uuid1 := s.GPUs[1].UUID
	if _, err := d.Client().PatchSession(ctx(t), "live", client.PatchRequest{Quotas: map[string]uint64{uuid1: 100 * giB}}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("PATCH past capacity = %v", err)
	}
	if l.Limit(1) != q {
		t.Fatalf("refused PATCH changed the ledger: %d", l.Limit(1))
	}
	if err := l.Reserve(int(a.Slot), 0, giB); err != nil {
		t.Fatal(err)
	}
	got := get(t, d, "live")
	if got.GPUs[0].UsedBytes != giB || len(got.Processes) != 1 || got.Processes[0].UsedBytes[got.GPUs[0].UUID] != giB {
		t.Fatalf("session after reserve: %+v", got)
	}
	// STATUS over IPC gives the same session object.
	raw, err := conn.Status("live", "")
	if err != nil {
		t.Fatal(err)
	}
	var viaIPC client.Session
	if err := json.Unmarshal(raw, &viaIPC); err != nil || viaIPC.ID != "live" || viaIPC.GPUs[0].UsedBytes != giB {
		t.Fatalf("STATUS = %s, %v", raw, err)
	}
	// DETACH is acknowledged but gives nothing back: the memory may still
	// be allocated, and the process is alive.
	if err := conn.Detach(a.Slot); err != nil {
		t.Fatal(err)
	}
	got = get(t, d, "live")
	if got.GPUs[0].UsedBytes != giB || len(got.Processes) != 1 {
		t.Fatalf("session after detach: %+v", got)
	}
	if err := conn.Detach(a.Slot + 1); err == nil {
		t.Fatal("DETACH of a slot that is not the process's succeeded")
	}
	var re *ipc.RemoteError
	if _, err := conn.Attach("nope", ""); !errors.As(err, &re) || re.Code != ipc.CodeUnknown {
		t.Fatalf("attach to an unknown session = %v", err)
	}
	// A process in no Slurm job that names no session belongs to none.
	if _, err := conn.Attach("", ""); !errors.As(err, &re) || re.Code != ipc.CodeNoSession {
		t.Fatalf("attach naming no session outside a job = %v, want code %d", err, ipc.CodeNoSession)
	}
}

func TestReclaimOnExitAndNoSlot(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{ExtraArgs: []string{"--ledger-slots", "1"}})
	create(t, d, client.SessionRequest{ID: "r", UID: 1000, QuotaBytes: 8 * giB})
	c := mustChild(t, d, "r", 3*giB)
	s := get(t, d, "r")
	if s.GPUs[0].UsedBytes != 3*giB || len(s.Processes) != 1 || s.Processes[0].PID != c.pid() {
		t.Fatalf("with child attached: %+v", s)
	}
	// The only slot is taken: a second process is refused with "no free slot".
	if c2, line := startChild(t, d, "r", 0, -1); c2 != nil || !strings.HasPrefix(line, "ERR 5 ") {
		t.Fatalf("second attach with one slot: %q", line)
	}
	c.kill()
	waitFor(t, "reclaim after the child died", func() (bool, string) {
		s := get(t, d, "r")
		return s.GPUs[0].UsedBytes == 0 && len(s.Processes) == 0, toJSON(s)
	})
	rep, err := d.Client().DeleteSession(ctx(t), "r")
	if err != nil {
		t.Fatal(err)
	}
	if rep.GPUs[0].ReclaimedBytes != 3*giB || rep.GPUs[0].PeakBytes != 3*giB || rep.GPUs[0].FinalUsedBytes != 0 {
		t.Fatalf("report %+v", rep.GPUs[0])
	}
}

func TestOwnership(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	if os.Getuid() != 0 {
		t.Fatal("this test starts children as other uids and must run as root (CI does)")
	}
	create(t, d, client.SessionRequest{ID: "mine", UID: 4242, QuotaBytes: giB})
	tests := []struct {
		name     string
		uid      int
		wantCode string
	}{
		{"owner", 4242, ""},
		{"other user", 4243, "ERR 3 "},
		{"root", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, line := startChild(t, d, "mine", 0, tc.uid)
			if tc.wantCode == "" {
				if c == nil {
					t.Fatalf("attach as uid %d refused: %q", tc.uid, line)
				}
				c.kill()
				return
			}
			if c != nil || !strings.HasPrefix(line, tc.wantCode) {
				t.Fatalf("attach as uid %d: %q, want %q", tc.uid, line, tc.wantCode)
			}
		})
	}
}

func TestToken(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Token: "s3cret"})
	create(t, d, client.SessionRequest{ID: "t", UID: 0, QuotaBytes: giB})
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"missing", "", false},
		{"wrong", "s3creT", false},
		{"prefix", "s3cre", false},
		{"longer", "s3cret!", false},
		{"right", "s3cret", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := ipc.Dial(d.IPCSock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			a, err := conn.Attach("t", tc.token)
			_, serr := conn.Status("t", tc.token)
			if tc.ok {
				if err != nil || serr != nil {
					t.Fatalf("attach/status with the right token: %v / %v", err, serr)
				}
				conn.Detach(a.Slot)
				a.Close()
				return
			}
			var re *ipc.RemoteError
			if !errors.As(err, &re) || re.Code != ipc.CodeBadToken {
				t.Fatalf("attach = %v, want code %d", err, ipc.CodeBadToken)
			}
			if !errors.As(serr, &re) || re.Code != ipc.CodeBadToken {
				t.Fatalf("status = %v, want code %d", serr, ipc.CodeBadToken)
			}
			// A refused attach keeps the connection usable.
			if _, err := conn.Ping([]byte("x")); err != nil {
				t.Fatalf("ping after refusal: %v", err)
			}
		})
	}
}

func frame(magic uint32, version, typ uint16, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func TestBadFrameClosesOnlyThatConnection(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	good, err := ipc.Dial(d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := good.Ping([]byte("before")); err != nil {
		t.Fatal(err)
	}
	oversize := binary.LittleEndian.AppendUint32(nil, ipc.Magic)
	oversize = append(oversize, 1, 0, 1, 0)
	oversize = binary.LittleEndian.AppendUint32(oversize, 1<<20)
	tests := []struct {
		name     string
		data     []byte
		wantCode uint32 // ERROR code sent before closing
	}{
		{"bad magic", frame(0xdeadbeef, 1, 1, nil), ipc.CodeBadRequest},
		{"version 2", frame(ipc.Magic, 2, 1, nil), ipc.CodeVersion},
		{"unknown type", frame(ipc.Magic, 1, 77, nil), ipc.CodeBadRequest},
		{"response type", frame(ipc.Magic, 1, uint16(ipc.TypePong), nil), ipc.CodeBadRequest},
		{"length over 4096", oversize, ipc.CodeBadRequest},
		{"ping over 64 bytes", frame(ipc.Magic, 1, 1, make([]byte, 65)), ipc.CodeBadRequest},
		{"attach trailing byte", frame(ipc.Magic, 1, 3, []byte{1, 0, 'a', 0, 0, 9}), ipc.CodeBadRequest},
		{"attach flags zero", frame(ipc.Magic, 1, 3, []byte{1, 0, 'a', 0, 0, 0, 0, 0, 0}), ipc.CodeBadRequest},
		{"attach unknown flag", frame(ipc.Magic, 1, 3, []byte{1, 0, 'a', 0, 0, 2, 0, 0, 0}), ipc.CodeBadRequest},
		{"status empty session", frame(ipc.Magic, 1, 7, []byte{0, 0}), ipc.CodeBadRequest},
		{"detach short", frame(ipc.Magic, 1, 5, []byte{1}), ipc.CodeBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad, err := net.Dial("unix", d.IPCSock)
			if err != nil {
				t.Fatal(err)
			}
			defer bad.Close()
			if _, err := bad.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			bad.SetReadDeadline(time.Now().Add(10 * time.Second))
			reply, err := io.ReadAll(bad)
			if err != nil {
				t.Fatalf("connection not closed: %v", err)
			}
			buf := make([]byte, ipc.HeaderSize+ipc.MaxPayload)
			typ, p, err := ipc.ReadFrame(bytes.NewReader(reply), buf)
			if err != nil {
				t.Fatalf("reply %x: %v", reply, err)
			}
			resp, err := ipc.ParseResponse(typ, p)
			if err != nil || resp.Type != ipc.TypeError || resp.Code != tc.wantCode {
				t.Fatalf("reply %+v, %v; want ERROR %d", resp, err, tc.wantCode)
			}
			// The other connection still works.
			if got, err := good.Ping([]byte("after")); err != nil || string(got) != "after" {
				t.Fatalf("good connection after a bad frame: %q, %v", got, err)
			}
		})
	}
	// Several requests in one write are answered in order.
	pipe := append(frame(ipc.Magic, 1, 1, []byte("a")), frame(ipc.Magic, 1, 1, []byte("b"))...)
	c, err := net.Dial("unix", d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(pipe)
	buf := make([]byte, ipc.HeaderSize+ipc.MaxPayload)
	for _, want := range []string{"a", "b"} {
		typ, p, err := ipc.ReadFrame(c, buf)
		if err != nil || typ != ipc.TypePong || string(p) != want {
			t.Fatalf("pipelined reply %v %q %v, want PONG %q", typ, p, err, want)
		}
	}
}

func TestRestartReadoption(t *testing.T) {
	for _, mode := range []string{"sigterm", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
			create(t, d, client.SessionRequest{ID: "keep", UID: 0, QuotaBytes: 8 * giB})
			create(t, d, client.SessionRequest{ID: "lost", UID: 0, QuotaBytes: 4 * giB})
			alive := mustChild(t, d, "keep", 2*giB)
			dying := mustChild(t, d, "keep", giB)
			before := get(t, d, "keep")
			if before.GPUs[0].UsedBytes != 3*giB {
				t.Fatalf("before restart: %+v", before)
			}
			if mode == "sigkill" {
				d.Kill() // sockets stay behind: the restart must find them stale
			} else {
				d.Stop()
				if code := d.ExitCode(); code != 0 {
					t.Fatalf("gpusliced exit code after SIGTERM: %d", code)
				}
			}
			// While the daemon is down: a process dies, a ledger file is lost.
			dying.kill()
			limPath, ctrPath := ledger.Paths(d.LedgerDir, "lost")
			os.Remove(limPath)
			os.Remove(ctrPath)
			d.Restart()

			s := get(t, d, "keep")
			if !s.Created.Equal(before.Created) || s.GPUs[0].LimitBytes != 8*giB {
				t.Fatalf("session not restored: %+v", s)
			}
			waitFor(t, "dead process reclaimed at restart", func() (bool, string) {
				s := get(t, d, "keep")
				return s.GPUs[0].UsedBytes == 2*giB && len(s.Processes) == 1 && s.Processes[0].PID == alive.pid(), toJSON(s)
			})
			lost := get(t, d, "lost")
			if lost.GPUs[0].LimitBytes != 4*giB || lost.GPUs[0].UsedBytes != 0 {
				t.Fatalf("recreated ledger: %+v", lost)
			}
			// The surviving process is watched again: its death is noticed.
			alive.kill()
			waitFor(t, "re-adopted process reclaimed", func() (bool, string) {
				s := get(t, d, "keep")
				return s.GPUs[0].UsedBytes == 0 && len(s.Processes) == 0, toJSON(s)
			})
			rep, err := d.Client().DeleteSession(ctx(t), "keep")
			if err != nil || rep.GPUs[0].ReclaimedBytes != 3*giB || rep.GPUs[0].PeakBytes != 3*giB {
				t.Fatalf("report %+v, %v", rep, err)
			}
		})
	}
}

func TestTTLReaper(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{DefaultTTL: 300 * time.Millisecond, RecoveryInterval: 100 * time.Millisecond})
	create(t, d, client.SessionRequest{ID: "short", UID: 0, QuotaBytes: giB})
	create(t, d, client.SessionRequest{ID: "long", UID: 0, QuotaBytes: giB, TTLSeconds: 3600})
	// "busy" gets its 1 s TTL only once its process is attached, so a slow
	// start of the process cannot expire it first.
	create(t, d, client.SessionRequest{ID: "busy", UID: 0, QuotaBytes: giB, TTLSeconds: 3600})
	busy := mustChild(t, d, "busy", 0)
	one := int64(1)
	if _, err := d.Client().PatchSession(ctx(t), "busy", client.PatchRequest{TTLSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	patched := time.Now()
	waitFor(t, "expired session reaped", func() (bool, string) {
		_, err := d.Client().GetSession(ctx(t), "short")
		return errors.Is(err, client.ErrNotFound), toJSON(err)
	})
	rep, err := d.Client().History(ctx(t), "short")
	if err != nil || rep.Reason != "ttl" {
		t.Fatalf("history of reaped session: %+v, %v", rep, err)
	}
	// A session with an attached process is kept past its TTL (and a few
	// sweeps more) ...
	time.Sleep(time.Until(patched.Add(1500 * time.Millisecond)))
	get(t, d, "busy")
	get(t, d, "long")
	// ... and reaped once the process is gone.
	busy.kill()
	waitFor(t, "expired session reaped after its process exited", func() (bool, string) {
		_, err := d.Client().GetSession(ctx(t), "busy")
		return errors.Is(err, client.ErrNotFound), toJSON(err)
	})
	get(t, d, "long")
}

func TestStaleSocket(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	bin := filepath.Join(d.Build, "bin", "gpusliced")
	// A second daemon on the same sockets refuses to start and leaves the first alone.
	other := t.TempDir()
	cmd := exec.Command(bin, "--runtime-dir", d.RuntimeDir, "--state-dir", other,
		"--ipc-socket", d.IPCSock, "--admin-socket", d.AdminSock,
		"--nvml-library", filepath.Join(d.Build, "lib", "libnvidia-ml.so.1"))
	cmd.Env = d.DaemonEnv()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another gpusliced is answering") {
		t.Fatalf("second daemon: %v\n%s", err, out)
	}
	if _, err := d.Client().Health(ctx(t)); err != nil {
		t.Fatalf("first daemon hurt by the second: %v", err)
	}
	// After SIGKILL the sockets are stale: a restart removes and replaces them.
	d.Kill()
	if _, err := os.Stat(d.IPCSock); err != nil {
		t.Fatalf("socket gone after SIGKILL: %v", err)
	}
	d.Restart()
	if _, err := ipcPing(d.IPCSock); err != nil {
		t.Fatalf("ping after restart over a stale socket: %v", err)
	}
	// A non-socket at the socket path is never removed.
	d.Stop()
	os.Remove(d.IPCSock)
	os.WriteFile(d.IPCSock, []byte("precious"), 0o644)
	cmd = exec.Command(bin, d.Args()...)
	cmd.Env = d.DaemonEnv()
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a socket") {
		t.Fatalf("daemon over a regular file: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(d.IPCSock); string(b) != "precious" {
		t.Fatal("regular file at the socket path was touched")
	}
}

func ipcPing(sock string) ([]byte, error) {
	c, err := ipc.Dial(sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Ping([]byte("p"))
}

func TestGracefulShutdownRemovesSockets(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	d.Stop()
	if d.ExitCode() != 0 {
		t.Fatalf("exit code %d", d.ExitCode())
	}
	for _, p := range []string{d.IPCSock, d.AdminSock} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
}

func toJSON(v any) string {
	if err, ok := v.(error); ok {
		if err == nil {
			return "nil"
		}
		return err.Error()
	}
	b, _ := json.Marshal(v)
	return string(b)
}
