package testenv

// The local accounts the suites run jobs and processes as. Every suite
// that needs one asks here; the account is made when missing (by any
// suite, in any order, also by several test binaries at once) and left in
// place: `make test-clean` (scripts/test-clean.sh) removes the accounts
// this file made, which it knows by their comment.

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Test user names. Two, so that one can be another user's neighbour; a
// third plays the hostile user of the soak (tests/slurm/soak_test.go).
const (
	TestUser1 = "gsltest1"
	TestUser2 = "gsltest2"
	TestUser3 = "gsltest3"
)

// UserComment marks the accounts made here (their GECOS field), for
// scripts/test-clean.sh.
const UserComment = "gpuslice test user"

// usersLock serialises account creation between test binaries (useradd
// refuses to run while another holds /etc/passwd's lock).
const usersLock = "/run/lock/gpuslice-test-users.lock"

// Account is a local user's name and ids.
type Account struct {
	Name     string
	UID, GID uint32
}

// User returns the test account name (TestUser1, 2 or 3), making it
// when this machine does not have it. Making one needs root: without root
// the test is skipped when the account is missing.
func User(t testing.TB, name string) Account {
	t.Helper()
	a, err := EnsureUser(name)
	if err != nil {
		if os.Getuid() != 0 {
			t.Skipf("test user %s: %v (making it needs root)", name, err)
		}
		t.Fatalf("test user %s: %v", name, err)
	}
	return a
}

// EnsureUser is User for code without a testing.TB (a suite's TestMain).
func EnsureUser(name string) (Account, error) {
	if name != TestUser1 && name != TestUser2 && name != TestUser3 {
		return Account{}, fmt.Errorf("%q is not a test user (%s, %s, %s)", name, TestUser1, TestUser2, TestUser3)
	}
	if a, err := lookupAccount(name); err == nil {
		return a, nil
	}
	if os.Getuid() != 0 {
		return Account{}, fmt.Errorf("no such user and not root")
	}
	unlock, err := lockUsers()
	if err != nil {
		return Account{}, err
	}
	defer unlock()
	if a, err := lookupAccount(name); err == nil {
		return a, nil // another binary made it while this one waited
	}
	out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
		"--shell", "/usr/sbin/nologin", "--user-group", "--comment", UserComment, name).CombinedOutput()
	if err != nil {
		return Account{}, fmt.Errorf("useradd: %v: %s", err, out)
	}
	return lookupAccount(name)
}

// lockUsers takes usersLock; the function it returns releases it.
func lockUsers() (func(), error) {
	if err := os.MkdirAll("/run/lock", 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(usersLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", usersLock, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// LoginShell gives the test account name the shell /bin/sh, for the tests
// that log it in over ssh (sshd runs a command through the account's
// shell; the accounts are made with nologin). Root only.
func LoginShell(name string) error {
	if _, err := EnsureUser(name); err != nil {
		return err
	}
	unlock, err := lockUsers()
	if err != nil {
		return err
	}
	defer unlock()
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) == 7 && f[0] == u.Username && f[6] == "/bin/sh" {
			return nil
		}
	}
	if out, err := exec.Command("usermod", "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
		return fmt.Errorf("usermod --shell /bin/sh %s: %v: %s", name, err, out)
	}
	return nil
}

func lookupAccount(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return Account{}, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return Account{}, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	return Account{Name: name, UID: uint32(uid), GID: uint32(gid)}, nil
}
