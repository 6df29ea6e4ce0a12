package core

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ledger"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// userCopy copies the libraries and the test programs a user's process
// needs into a directory every user can read, so the build directory's own
// permissions do not matter.
func userCopy(t *testing.T) (dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gsuser")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	build := testenv.BuildDir(t)
	if out, err := exec.Command("cp", "-a", filepath.Join(build, "lib"), filepath.Join(dir, "lib")).CombinedOutput(); err != nil {
		t.Fatalf("copy lib: %v\n%s", err, out)
	}
	for _, p := range []string{"gs_probe", "gs_ledger_write"} {
		if out, err := exec.Command("cp", probe.Bin(t, p), filepath.Join(dir, p)).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", p, err, out)
		}
	}
	exec.Command("chmod", "-R", "a+rX", dir).Run()
	return dir
}

func runAs(t *testing.T, uid, gid uint32, env []string, prog string, args ...string) probe.Result {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	p := probe.StartCmd(t, cmd, env)
	p.CloseStdin()
	p.Wait()
	return p.Result()
}

// A non-root user cannot attach to root's or another user's session, cannot
// open ledger files, and cannot raise its limit through the mapping.
func TestNonRootUserIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create users and switch to them")
	}
	u1, u2 := testenv.User(t, testenv.TestUser1), testenv.User(t, testenv.TestUser2)
	uid1, gid1, uid2 := u1.UID, u1.GID, u2.UID
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	mine := newSession(t, d, client.SessionRequest{UID: uid1, QuotaBytes: GiB})
	rootS := newSession(t, d, client.SessionRequest{UID: 0, QuotaBytes: GiB})
	other := newSession(t, d, client.SessionRequest{UID: uid2, QuotaBytes: GiB})
	dir := userCopy(t)
	env := func(session string) []string {
		var out []string
		for _, kv := range d.Env() {
			if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
				out = append(out, kv)
			}
		}
		return append(out, "LD_LIBRARY_PATH="+filepath.Join(dir, "lib"),
			"LD_PRELOAD="+filepath.Join(dir, "lib", "libgpuslice.so"), "GPUSLICE_SESSION="+session,
			"HOME=/")
	}
	gsProbe := filepath.Join(dir, "gs_probe")

	t.Run("own session admitted", func(t *testing.T) {
		r := runAs(t, uid1, gid1, env(mine.ID), gsProbe, "dev:0", "alloc:256M", "alloc:1G")
		if a := r.Find(t, "alloc", 0); a.Get("rc") != "0" {
			t.Fatalf("alloc in the user's own session: %s\n%s", a.Line, r.Stderr)
		}
		if a := r.Find(t, "alloc", 1); a.Get("rc") != "2" {
			t.Errorf("over its quota: %s", a.Line)
		}
		noStderr(t, "probe", r.Stderr)
	})
	for _, tc := range []struct{ name, id string }{{"root's session", rootS.ID}, {"another user's session", other.ID}} {
		t.Run(tc.name+" refused", func(t *testing.T) {
			r := runAs(t, uid1, gid1, env(tc.id), gsProbe, "dev:0", "alloc:1M")
			if a := r.Find(t, "alloc", 0); a.Get("rc") != "2" {
				t.Errorf("alloc in %s: %s", tc.name, a.Line)
			}
			lines := r.StderrLines()
			if len(lines) != 1 || !strings.Contains(lines[0], "cannot attach to session '"+tc.id+"'") ||
				!strings.Contains(lines[0], "not permitted") {
				t.Errorf("stderr: %q", r.Stderr)
			}
		})
	}
	t.Run("ledger files and the limits mapping", func(t *testing.T) {
		var paths []string
		for _, id := range []string{mine.ID, rootS.ID} {
			lim, ctr := ledger.Paths(d.LedgerDir, id)
			paths = append(paths, lim, ctr)
		}
		args := append([]string{d.IPCSock, mine.ID}, paths...)
		r := runAs(t, uid1, gid1, env(mine.ID), filepath.Join(dir, "gs_ledger_write"), args...)
		t.Logf("gs_ledger_write as uid %d:\n%s%s", uid1, r.Stdout, r.Stderr)
		for _, o := range r.All("open") {
			if o.Get("result") == "ok" {
				t.Errorf("user opened %s", o.Get("path"))
			}
		}
		if n := len(r.All("open")); n != len(paths) {
			t.Errorf("%d open attempts, want %d:\n%s", n, len(paths), r.Stdout)
		}
		if a := r.Find(t, "attach", 0); a.Get("result") != "ok" {
			t.Fatalf("attach to the user's own session: %s\n%s", a.Line, r.Stderr)
		}
		if m := r.Find(t, "limits_mode", 0); !strings.Contains(m.Line, "rdonly") {
			t.Errorf("limits fd: %s", m.Line)
		}
		for _, step := range []string{"mprotect", "mmap_write", "pwrite", "reopen"} {
			if s := r.Find(t, step, 0); s.Get("result") == "ok" {
				t.Errorf("%s succeeded: the user could write its limit", step)
			}
		}
		before, after := r.Find(t, "limit", 0), r.Find(t, "limit", 1)
		if before.Uint(t, "before") != GiB || after.Uint(t, "after") != GiB {
			t.Errorf("limit before %s, after %s", before.Line, after.Line)
		}
	})
	l := openLedger(t, d, mine.ID)
	if l.Limit(0) != GiB {
		t.Errorf("ledger limit %d after the attempts", l.Limit(0))
	}
}
