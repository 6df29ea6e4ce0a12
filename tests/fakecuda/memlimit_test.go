package fakecuda

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// NVML's memory limits per cgroup v2 (R615): nvmlDeviceSetMemoryLimits_v1 /
// nvmlDeviceGetMemoryLimits_v1 on real cgroup directories, enforced by the
// allocator of every process of the cgroup and its descendants.

const (
	nvmlNoPermission = "4"
	nvmlNotSupported = "3"
	nvmlNotFound     = "6"
	cudaOOM          = "2"
	limitMax         = "18446744073709551615"
)

// cgroup2Root is where the cgroup v2 hierarchy is mounted (on a hybrid
// machine, /sys/fs/cgroup/unified).
func cgroup2Root(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if ok && strings.HasPrefix(post, "cgroup2 ") {
			if fields := strings.Fields(pre); len(fields) >= 5 && fields[3] == "/" {
				return fields[4]
			}
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

// newCgroup makes a cgroup v2 directory of its own (under parent, or at
// the top when parent is ""), removed when the test ends.
func newCgroup(t *testing.T, parent string) string {
	t.Helper()
	if parent == "" {
		b := make([]byte, 6)
		rand.Read(b)
		parent = cgroup2Root(t)
		parent = filepath.Join(parent, "fctest-"+hex.EncodeToString(b))
	} else {
		parent = filepath.Join(parent, "child")
	}
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, parent) })
	return parent
}

func removeCgroup(t *testing.T, dir string) {
	for i := 0; i < 100; i++ { // a child that was just reaped may still populate it
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("cannot remove cgroup %s", dir)
}

// runIn runs fc_memlimit as a process of cgroup dir ("" = the test's own).
func runIn(t *testing.T, n *node, dir string, args ...string) result {
	t.Helper()
	old := n.attr
	defer func() { n.attr = old }()
	if dir != "" {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		n.attr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	return n.run([]string{"FAKECUDA_MEMORY_LIMITS=1"}, "fc_memlimit", args...).ok(t)
}

func results(r result, kind string) []string {
	var out []string
	for _, ev := range r.all(kind) {
		out = append(out, ev["result"])
	}
	return out
}

func wantResults(t *testing.T, what string, r result, kind string, want ...string) {
	t.Helper()
	if got := results(r, kind); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: %s results %v, want %v\n%s%s", what, kind, got, want, r.stdout, r.stderr)
	}
}

func mib(n int64) string { return strconv.FormatInt(n*MiB, 10) }

func TestMemoryLimitsNotSupported(t *testing.T) {
	n := newNode(t, "1GiB")
	cg := newCgroup(t, "")
	r := n.run(nil, "fc_memlimit", "set", "0", cg, "0", "100MiB", "get", "0", cg).ok(t)
	wantResults(t, "a driver without the calls", r, "set", nvmlNotSupported)
	wantResults(t, "a driver without the calls", r, "get", nvmlNotSupported)
}

func TestMemoryLimitHard(t *testing.T) {
	n := newNode(t, "2x1GiB")
	cg := newCgroup(t, "")
	child := newCgroup(t, cg)
	r := runIn(t, n, "", "set", "0", cg, "0", "100MiB", "get", "0", cg)
	wantResults(t, "set", r, "set", "0")
	if ev := r.one(t, "get"); ev["soft"] != "0" || ev["hard"] != mib(100) || ev["used"] != "0" {
		t.Fatalf("get after set: %v", ev)
	}

	// in the cgroup: held at the hard limit, as a driver's out of memory;
	// memory info shows the limit and the headroom under it
	r = runIn(t, n, cg, "alloc", "0", "60MiB", "alloc", "0", "60MiB", "meminfo", "0", "get", "0", cg,
		"alloc", "0", "40MiB", "get", "0", cg)
	wantResults(t, "in the cgroup", r, "alloc", "0", cudaOOM, "0")
	m := r.one(t, "meminfo")
	for _, k := range []string{"total", "total_v2", "cu_total"} {
		if m[k] != mib(100) {
			t.Errorf("meminfo %s = %s, want the hard limit %s", k, m[k], mib(100))
		}
	}
	for _, k := range []string{"free", "free_v2", "cu_free"} {
		if m[k] != mib(40) {
			t.Errorf("meminfo %s = %s, want %s", k, m[k], mib(40))
		}
	}
	if gets := r.all("get"); gets[0]["used"] != mib(60) || gets[1]["used"] != mib(100) {
		t.Fatalf("currentUsed in the cgroup: %v, want 60 MiB then 100 MiB", gets)
	}
	// the process exited: its charges are given back
	if ev := runIn(t, n, "", "get", "0", cg).one(t, "get"); ev["used"] != "0" {
		t.Fatalf("currentUsed after the process exited: %v", ev)
	}

	// a child cgroup is held by its ancestor's limit
	r = runIn(t, n, child, "alloc", "0", "60MiB", "alloc", "0", "60MiB", "get", "0", cg, "get", "0", child)
	wantResults(t, "in a child cgroup", r, "alloc", "0", cudaOOM)
	if gets := r.all("get"); gets[0]["used"] != mib(60) || gets[1]["hard"] != limitMax {
		t.Fatalf("limits seen from the child: %v", gets)
	}

	// outside the cgroup, and on another device: no limit
	wantResults(t, "outside", runIn(t, n, "", "alloc", "0", "200MiB"), "alloc", "0")
	wantResults(t, "another device", runIn(t, n, cg, "alloc", "1", "200MiB"), "alloc", "0")

	// cleared: soft 0, hard NVML_DEVICE_MEMORY_LIMIT_MAX
	r = runIn(t, n, "", "set", "0", cg, "0", "max", "get", "0", cg)
	if ev := r.one(t, "get"); ev["soft"] != "0" || ev["hard"] != limitMax {
		t.Fatalf("get after clearing: %v", ev)
	}
	wantResults(t, "after clearing", runIn(t, n, cg, "alloc", "0", "200MiB"), "alloc", "0")
}

// A killed process's charges are given back (as its device files close).
func TestMemoryLimitDeadProcess(t *testing.T) {
	n := newNode(t, "1GiB")
	cg := newCgroup(t, "")
	runIn(t, n, "", "set", "0", cg, "0", "100MiB")
	fd, err := syscall.Open(cg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	n.attr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	b := n.start([]string{"FAKECUDA_MEMORY_LIMITS=1"}, "hold", "fc_memlimit", "alloc", "0", "80MiB", "hold", "60")
	n.attr = nil
	if ev := runIn(t, n, "", "get", "0", cg).one(t, "get"); ev["used"] != mib(80) {
		t.Fatalf("currentUsed while the holder lives: %v", ev)
	}
	b.cmd.Process.Kill()
	b.wait(t)
	if ev := runIn(t, n, "", "get", "0", cg).one(t, "get"); ev["used"] != "0" {
		t.Fatalf("currentUsed after the holder was killed: %v", ev)
	}
	wantResults(t, "after the holder died", runIn(t, n, cg, "alloc", "0", "100MiB"), "alloc", "0")
}

// A cgroup removed and made again under the same name is a new cgroup: no limit.
func TestMemoryLimitRecreatedCgroup(t *testing.T) {
	n := newNode(t, "1GiB")
	cg := newCgroup(t, "")
	runIn(t, n, "", "set", "0", cg, "0", "100MiB")
	if err := os.Remove(cg); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if ev := runIn(t, n, "", "get", "0", cg).one(t, "get"); ev["soft"] != "0" || ev["hard"] != limitMax || ev["used"] != "0" {
		t.Fatalf("get on the remade cgroup: %v, want no limit", ev)
	}
	wantResults(t, "in the remade cgroup", runIn(t, n, cg, "alloc", "0", "200MiB"), "alloc", "0")
}

func TestMemoryLimitErrors(t *testing.T) {
	n := newNode(t, "1GiB")
	cg := newCgroup(t, "")
	r := runIn(t, n, "", "set", "0", t.TempDir(), "0", "1MiB", "get", "0", "/nonexistent/cgroup",
		"set", "0", cg, "2MiB", "1MiB", "nulls", "0")
	wantResults(t, "not a cgroup / soft over hard", r, "set", nvmlNotFound, "2")
	wantResults(t, "not a cgroup", r, "get", nvmlNotFound)
	if ev := r.one(t, "nulls"); ev["set"] != "2" || ev["get"] != "2" || ev["set_ns"] != "2" || ev["get_ns"] != "2" {
		t.Fatalf("NULL limits or nameSpace: %v, want NVML_ERROR_INVALID_ARGUMENT (2) from each", ev)
	}
	// a driver without the calls says so before it looks at the arguments
	if ev := newNode(t, "1GiB").run(nil, "fc_memlimit", "nulls", "0").ok(t).one(t, "nulls"); ev["set"] != nvmlNotSupported {
		t.Fatalf("NULL limits on a state without limits: %v", ev)
	}

	u := testenv.User(t, testenv.TestUser1)
	n.attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	r = n.run([]string{"FAKECUDA_MEMORY_LIMITS=1"}, "fc_memlimit", "set", "0", cg, "0", "1MiB", "get", "0", cg).ok(t)
	wantResults(t, "not root", r, "set", nvmlNoPermission)
	wantResults(t, "reading needs no privilege", r, "get", "0")
}

// A process of a cgroup namespace sees its cgroup as "/": fakecuda finds its
// directory through the namespace's own cgroup2 mount (as slurmd's nodes
// in the Slurm suite have) or, with only the host's mount (root "/.."), by
// its pid in cgroup.procs; a limit set from outside holds it either way.
func TestMemoryLimitCgroupNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	n := newNode(t, "1GiB")
	job := newCgroup(t, newCgroup(t, ""))
	runIn(t, n, "", "set", "0", job, "0", "50MiB")
	probe := n.program("fc_memlimit") + " alloc 0 40MiB alloc 0 20MiB meminfo 0"
	for name, script := range map[string]string{
		"own mount":  "mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec " + probe,
		"host mount": "exec " + probe,
	} {
		fd, err := syscall.Open(job, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "--cgroup", "--mount", "sh", "-c", script)
		cmd.Env = n.env("FAKECUDA_MEMORY_LIMITS=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		out, err := cmd.CombinedOutput()
		syscall.Close(fd)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		r := result{stdout: string(out), events: parseEvents(string(out))}
		wantResults(t, name, r, "alloc", "0", cudaOOM)
		if m := r.one(t, "meminfo"); m["total"] != mib(50) || m["free"] != mib(10) {
			t.Errorf("%s: meminfo %v, want total 50 MiB, free 10 MiB", name, m)
		}
	}
}
