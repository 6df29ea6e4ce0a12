package containers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// fakecudaHook is the test's stand-in for enroot's 98-nvidia.sh: where
// nvidia-container-cli would mount the driver's libraries and pass the
// device settings on, it binds fakecuda's libraries into the image's
// library directory and passes fakecuda's settings. /dev/shm (fakecuda's
// device state) is bound by enroot's own 10-system.fstab.
const fakecudaHook = `#! /usr/bin/env bash
set -euo pipefail
for lib in ${FAKECUDA_TEST_LIBS}; do
    printf '%s /usr/lib/x86_64-linux-gnu/%s none x-create=file,bind,ro,nosuid,nodev,private\n' "${lib}" "$(basename "${lib}")" >> "${ENROOT_MOUNTS}"
done
printf 'FAKECUDA_DEVICES=%s\nFAKECUDA_STATE=%s\nFAKECUDA_CTX_BYTES=%s\n' \
    "${FAKECUDA_DEVICES}" "${FAKECUDA_STATE}" "${FAKECUDA_CTX_BYTES}" >> "${ENROOT_ENVIRON}"
`

// enroot is one node's enroot: its system configuration (the build's
// hooks, mounts and environment files, gpuslice's hook as shipped, the
// fakecuda driver hook) and private data, cache and runtime directories.
type enroot struct {
	bin    string // enroot's bin directory
	sys    string // ENROOT_SYSCONF_PATH
	user   string // ENROOT_CONFIG_PATH (the job user's own configuration)
	data   string
	lib    string // the interceptor, as installed
	daemon *testenv.Daemon
	// containers, when set, is ENROOT_DATA_PATH, root's shared container
	// root (else under data)
	containers string
}

func newEnroot(t *testing.T, d *testenv.Daemon) *enroot {
	t.Helper()
	dir := runtimeDir(t, "enroot")
	// Readable by the job's user too (t.TempDir's parent is not).
	top, err := os.MkdirTemp("/tmp", "gsct-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o755)
	e := &enroot{bin: filepath.Join(dir, "bin"), sys: filepath.Join(top, "etc"), user: filepath.Join(top, "user"),
		data: filepath.Join(top, "data"), lib: stagedLib(t), daemon: d}
	for _, sub := range []string{"hooks.d", "mounts.d", "environ.d"} {
		from := filepath.Join(dir, "etc", "enroot", sub)
		ents, err := os.ReadDir(from)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			probe.CopyFile(t, filepath.Join(from, ent.Name()), filepath.Join(mkdir(t, filepath.Join(e.sys, sub)), ent.Name()), 0o755)
		}
	}
	probe.CopyFile(t, filepath.Join(testenv.RepoRoot(t), "etc", "enroot", "50-gpuslice.sh"),
		filepath.Join(e.sys, "hooks.d", "50-gpuslice.sh"), 0o755)
	writeFile(t, filepath.Join(e.sys, "hooks.d", "97-fakecuda.sh"), fakecudaHook, 0o755)
	mkdir(t, filepath.Join(e.user, "hooks.d"))
	return e
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dataPath is ENROOT_DATA_PATH, where container roots are.
func (e *enroot) dataPath() string {
	if e.containers != "" {
		return e.containers
	}
	return filepath.Join(e.data, "data")
}

// env is the environment enroot start runs with in job's step.
func (e *enroot) env(t *testing.T, job string) []string {
	t.Helper()
	env := jobEnv(e.daemon, e.lib, job)
	path := "PATH=" + e.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = path
			path = ""
		}
	}
	if path != "" {
		env = append(env, path)
	}
	return append(env,
		"ENROOT_SYSCONF_PATH="+e.sys, "ENROOT_CONFIG_PATH="+e.user,
		"ENROOT_DATA_PATH="+e.dataPath(), "ENROOT_CACHE_PATH="+filepath.Join(e.data, "cache"),
		"ENROOT_RUNTIME_PATH="+filepath.Join(e.data, "run"), "ENROOT_TEMP_PATH="+filepath.Join(e.data, "tmp"),
		"ENROOT_ALLOW_SUPERUSER=yes",
		// Where the packages' hook finds the interceptor (its default is
		// the package's /usr/lib/gpuslice/libgpuslice.so).
		"GPUSLICE_LIB="+e.lib,
		"FAKECUDA_TEST_LIBS="+strings.Join(fakecudaLibs(t), " "))
}

// container is the name the image's container root gets.
const container = "bullseye"

// create makes the image a container root (`enroot create`: unsquashfs
// into ENROOT_DATA_PATH), as pyxis does before it starts one; as is
// prepended to the command (setpriv, to create it as a job's user). The
// tests never start the squashfs file itself: enroot then mounts it with
// squashfuse and fuse-overlayfs and gives each about 100 polls (a
// mountpoint(1) and a sleep of 1 ms apiece, 0.3-0.5 s on this machine) to
// appear, failing "Failed to mount: IMAGE" when a busy machine takes
// longer, whatever the hooks do.
func (e *enroot) create(t *testing.T, env []string, as ...string) error {
	t.Helper()
	argv := append(append([]string{}, as...), filepath.Join(e.bin, "enroot"), "create", "-n", container, image(t))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// shared is root's container root, made once for the package's tests (an
// unsquashfs of the image takes ~3 s here) and removed by TestMain.
var shared struct {
	once sync.Once
	dir  string // its ENROOT_DATA_PATH
	err  error  // what went wrong making it
}

// useShared points e at root's shared container root, made by the first
// caller with e's configuration.
func (e *enroot) useShared(t *testing.T, job string) {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("/tmp", "gsct-containers-"); shared.err == nil {
			e.containers = shared.dir
			shared.err = e.create(t, e.env(t, job))
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	e.containers = shared.dir
}

// removeShared removes root's shared container root (TestMain).
func removeShared() {
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// start runs `enroot start bullseye argv...` in job's step, on root's
// shared container root.
func (e *enroot) start(t *testing.T, job string, argv ...string) *probe.Proc {
	t.Helper()
	e.useShared(t, job)
	return stepd(t, job, e.env(t, job), append([]string{"enroot", "start", container}, argv...)...)
}

// A job's program in an enroot container (a Debian 11 image, glibc 2.31)
// is held to the job's quota as on the host: the interceptor is loaded
// from the path the hook bound, its queries show the quota, an allocation
// past it fails with CUDA_ERROR_OUT_OF_MEMORY; when the job ends its
// memory returns and the session is released.
func TestEnrootJobHeldToQuota(t *testing.T) {
	d := daemon(t)
	e := newEnroot(t, d)
	job := newJob(t, d, 256*MiB)
	p := e.start(t, job, probeInImage, "pid", "dev:0", "meminfo", "nvml", "alloc:200M", "alloc:100M", "pause")
	p.Expect("paused")
	r := p.Result()
	checkHeld(t, r, 256*MiB)
	checkOldGlibc(t, r.Find(t, "pid", 0).Get("pid"), e.lib)
	if u := used(t, d, job); u != 200*MiB {
		t.Errorf("session holds %d while the container holds 200 MiB", u)
	}
	endJob(t, d, job, p, 200*MiB)
}

// A process in the container that gets rid of the interceptor and takes
// more than the job's quota is stopped by gpusliced's audit (the driver's
// per-process figure, the process's job from its ancestry), whatever way
// it got rid of it; the job's process within the quota keeps running.
func TestEnrootBypassStopped(t *testing.T) {
	cases := []struct {
		name string
		// userHook, when set, is a hook of the job's user
		// (~/.config/enroot/hooks.d), run after the system's.
		userHook string
		argv     []string
	}{
		{name: "unset LD_PRELOAD",
			argv: []string{"env", "-u", "LD_PRELOAD", probeInImage}},
		{name: "user hook drops LD_PRELOAD",
			userHook: "#! /bin/sh\nsed -i '/^LD_PRELOAD=/d' \"$ENROOT_ENVIRON\"\n",
			argv:     []string{probeInImage}},
		{name: "own loader and environment",
			argv: []string{"sh", "-c", `exec env -i FAKECUDA_DEVICES="$FAKECUDA_DEVICES" FAKECUDA_STATE="$FAKECUDA_STATE" ` +
				`FAKECUDA_CTX_BYTES="$FAKECUDA_CTX_BYTES" /lib64/ld-linux-x86-64.so.2 --inhibit-cache ` +
				`--library-path /usr/lib/x86_64-linux-gnu ` + probeInImage + ` "$@"`, "sh"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := daemon(t)
			e := newEnroot(t, d)
			job := newJob(t, d, 256*MiB)
			good := e.start(t, job, probeInImage, "dev:0", "alloc:64M", "pause")
			good.Expect("paused")
			if c.userHook != "" {
				writeFile(t, filepath.Join(e.user, "hooks.d", "90-mine.sh"), c.userHook, 0o755)
			}
			bad := e.start(t, job, append(c.argv, "pid", "dev:0", "meminfo", "alloc:512M", "pause")...)
			checkBypassStopped(t, d, job, good, bad)
		})
	}
}

// A job of an ordinary user: enroot runs the container in a user namespace
// (the user is root inside, the host sees the user), as it does under
// pyxis. The user creates the container root (starting the squashfs
// itself would need /dev/fuse, root's alone on this machine). gpusliced
// sees the user's uid through the namespace and the container's program
// is held to the job's quota.
func TestEnrootUserJobHeldToQuota(t *testing.T) {
	d := daemon(t)
	e := newEnroot(t, d)
	u := testenv.User(t, testenv.TestUser1)
	home := filepath.Join(filepath.Dir(e.data), "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	e.data = home
	job := newJobOf(t, d, u.UID, 256*MiB)
	// The test accounts' shell is nologin, which enroot would run the
	// command through as a login shell.
	env := append(e.env(t, job), "HOME="+home, "ENROOT_LOGIN_SHELL=false")
	setpriv := []string{"setpriv", fmt.Sprintf("--reuid=%d", u.UID), fmt.Sprintf("--regid=%d", u.GID), "--clear-groups"}
	if err := e.create(t, env, setpriv...); err != nil {
		t.Fatal(err)
	}
	p := stepd(t, job, env, append(setpriv, "enroot", "start", container,
		probeInImage, "pid", "dev:0", "meminfo", "nvml", "alloc:200M", "alloc:100M", "pause")...)
	p.Expect("paused")
	r := p.Result()
	checkHeld(t, r, 256*MiB)
	pid := r.Find(t, "pid", 0).Get("pid")
	checkOldGlibc(t, pid, e.lib)
	st, err := os.Stat("/proc/" + pid)
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != u.UID {
		t.Errorf("the container's process runs as uid %d on the host, want %s's %d", uid, u.Name, u.UID)
	}
	if used(t, d, job) != 200*MiB {
		t.Errorf("session holds %d while the container holds 200 MiB", used(t, d, job))
	}
	endJob(t, d, job, p, 200*MiB)
}
