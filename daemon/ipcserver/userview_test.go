package ipcserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// The helper process: run as another uid by TestReadsRevealNothing, it
// asks the server and prints one line per request.
func TestMain(m *testing.M) {
	if sock := os.Getenv("GS_IPC_READER_SOCK"); sock != "" {
		for _, id := range strings.Split(os.Getenv("GS_IPC_READER_IDS"), ",") {
			fmt.Println(readAs(sock, id))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func readAs(sock, id string) string {
	c, err := ipc.Dial(sock)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	var out []string
	_, serr := c.Status(id, "")
	_, verr := c.View(ipc.ViewStatus, id, 0)
	_, rerr := c.View(ipc.ViewReport, id, 0)
	for _, err := range []error{serr, verr, rerr} {
		var re *ipc.RemoteError
		if errors.As(err, &re) {
			out = append(out, fmt.Sprintf("%d %s", re.Code, re.Message))
		} else {
			out = append(out, fmt.Sprintf("ok? %v", err))
		}
	}
	return strings.Join(out, " | ")
}

// TestReadsRevealNothing: another user's session, live or released, reads
// exactly like a session that never existed, through STATUS and VIEW.
func TestReadsRevealNothing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test reads as another uid and must run as root (CI does)")
	}
	sock, m := startServer(t)
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o666)
	for _, id := range []string{"alice-live", "alice-done"} {
		if _, _, err := m.Create(api.SessionRequest{ID: id, UID: 4242, QuotaBytes: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Delete("alice-done"); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private: run a copy other uids
	// can execute.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(filepath.Dir(sock), "reader")
	if out, err := exec.Command("cp", self, exe).CombinedOutput(); err != nil {
		t.Fatalf("copy test binary: %v: %s", err, out)
	}
	os.Chmod(exe, 0o755)
	cmd := exec.Command(exe)
	cmd.Env = []string{"GS_IPC_READER_SOCK=" + sock, "GS_IPC_READER_IDS=alice-live,alice-done,never-was"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4243, Gid: 4243}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reader: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := fmt.Sprintf("%[1]d %[2]s | %[1]d %[2]s | %[1]d %[2]s", ipc.CodeNotYours, ipc.NotYoursMessage)
	if len(lines) != 3 {
		t.Fatalf("reader printed:\n%s", out)
	}
	for i, l := range lines {
		if l != want {
			t.Errorf("read %d as uid 4243: %q, want %q", i, l, want)
		}
	}

	// The owner reads both.
	cmd = exec.Command(exe)
	cmd.Env = []string{"GS_IPC_READER_SOCK=" + sock, "GS_IPC_READER_IDS=alice-live"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	out, _ = cmd.CombinedOutput()
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "ok? <nil> | ok? <nil> | 2 ") || !strings.Contains(got, "still running") {
		t.Fatalf("owner's reads: %q", got)
	}
	var page api.ViewPage
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.View(ipc.ViewFinished, "", 0) // root reads every report
	if err != nil || json.Unmarshal(raw, &page) != nil || len(page.Finished) != 1 || page.Finished[0].ID != "alice-done" {
		t.Fatalf("root's finished list: %s, %v", raw, err)
	}
}

// TestViewPages: a long list comes in frames that each fit, in order.
func TestViewPages(t *testing.T) {
	sock, m := startServer(t)
	const n = 60
	for i := 0; i < n; i++ {
		if _, _, err := m.Create(api.SessionRequest{ID: fmt.Sprintf("job-%03d", i), QuotaBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ids []string
	off, pages := uint32(0), 0
	for {
		raw, err := c.View(ipc.ViewLive, "", off)
		if err != nil {
			t.Fatal(err)
		}
		var p api.ViewPage
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range p.Live {
			ids = append(ids, s.ID)
		}
		if p.Next == 0 {
			break
		}
		off = p.Next
	}
	if len(ids) != n || pages < 2 || ids[0] != "job-000" || ids[n-1] != fmt.Sprintf("job-%03d", n-1) {
		t.Fatalf("%d sessions in %d pages: %v", len(ids), pages, ids)
	}
}
