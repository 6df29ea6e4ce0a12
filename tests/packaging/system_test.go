package packaging

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// These tests install the .debs into this machine with dpkg (as a CI machine
// would be provisioned), run the installed programs, upgrade, remove and
// purge. They refuse to touch a machine where gpuslice is already installed
// or has state, and purge both packages when they end. There is no running
// systemd here, so the maintainer scripts must skip systemctl; the tests
// start the installed daemon by hand, as systemd would (ExecStart), but on
// private sockets and a private fake GPU.

const (
	installedConf        = "/etc/gpuslice/gpusliced.yaml"
	installedNVML        = "/usr/lib/gpuslice/fakecuda/libnvidia-ml.so.1"
	installedCLI         = "/usr/bin/gpuslice"
	installedUnit        = "/usr/lib/systemd/system/gpusliced.service"
	installedInterceptor = "/usr/lib/gpuslice/libgpuslice.so"
	fakecudaDir          = "/usr/lib/gpuslice/fakecuda"
	exampleApp           = "/usr/libexec/gpuslice/examples/target_app"
	stateDir             = "/var/lib/gpuslice"
	runtimeDir           = "/run/gpuslice"
	fakeDevices          = "2x80GiB"
	mib                  = 1 << 20
	sessionQuotaMB       = 256
)

var installedPrograms = []string{
	"/usr/sbin/gpusliced", "/usr/bin/gpuslice",
	"/usr/libexec/gpuslice/gpuslice-prolog", "/usr/libexec/gpuslice/gpuslice-epilog",
}

// requireMachine skips unless the suite may install packages here, and fails
// when gpuslice is already present (never disturb an existing install).
func requireMachine(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("installing packages needs root")
	}
	need(t, "dpkg", "dpkg-query")
	for _, pkg := range []string{"gpuslice", "gpuslice-fakecuda"} {
		out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", pkg).Output()
		if s := string(out); s != "" && !strings.HasSuffix(s, "not-installed") {
			t.Fatalf("%s is already on this machine (%s): the suite will not touch it; dpkg --purge it first", pkg, s)
		}
	}
	for _, dir := range []string{stateDir, runtimeDir, "/etc/gpuslice"} {
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%s exists: a gpuslice installation or its state is on this machine; the suite will not touch it", dir)
		}
	}
	// Purge whatever the test installs, last (cleanups run in reverse order).
	t.Cleanup(func() {
		out, err := exec.Command("dpkg", "--purge", "gpuslice", "gpuslice-fakecuda").CombinedOutput()
		if err != nil {
			t.Errorf("dpkg --purge: %v\n%s", err, out)
		}
	})
}

// dpkgInstall installs packages and checks dpkg said nothing alarming.
func dpkgInstall(t *testing.T, debs ...string) string {
	t.Helper()
	out := run(t, nil, "dpkg", append([]string{"--install"}, debs...)...)
	for _, l := range lines(out) {
		low := strings.ToLower(l)
		if strings.Contains(low, "warning") || strings.Contains(low, "error") || strings.Contains(low, "systemctl") ||
			strings.Contains(low, "failed") {
			t.Errorf("dpkg --install printed: %s", l)
		}
	}
	return out
}

// dpkgStatus returns "<status> <version>" of a package, "" when dpkg does
// not know it.
func dpkgStatus(t *testing.T, pkg string) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Status} ${Version}", pkg).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// installedDaemon is the installed /usr/sbin/gpusliced started by hand.
type installedDaemon struct {
	t         *testing.T
	dir       string
	adminSock string
	ipcSock   string
	state     string // FAKECUDA_STATE
	log       string
	cmd       *exec.Cmd
	done      chan struct{}
}

// newInstalledDaemon prepares private sockets and a private fake GPU; the
// runtime and state directories are the installed configuration's.
func newInstalledDaemon(t *testing.T) *installedDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gspkg")
	if err != nil {
		t.Fatal(err)
	}
	d := &installedDaemon{t: t, dir: dir, adminSock: filepath.Join(dir, "admin.sock"),
		ipcSock: filepath.Join(dir, "ipc.sock"), log: filepath.Join(dir, "gpusliced.log"),
		state: fmt.Sprintf("gspkg-%d-%d", os.Getpid(), time.Now().UnixNano())}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			if b, err := os.ReadFile(d.log); err == nil {
				t.Logf("gpusliced log:\n%s", b)
			}
		}
		os.Remove(filepath.Join("/dev/shm", "fakecuda-"+d.state))
		os.RemoveAll(dir)
	})
	return d
}

// env is what the CLI and job processes need to reach this daemon and its
// fake GPUs (the installed fakecuda).
func (d *installedDaemon) env() []string {
	return append(testenv.BaseEnv(), "LD_LIBRARY_PATH="+fakecudaDir,
		"FAKECUDA_DEVICES="+fakeDevices, "FAKECUDA_STATE="+d.state, "FAKECUDA_CTX_BYTES=0",
		"GPUSLICE_ADMIN_SOCK="+d.adminSock, "GPUSLICE_IPC_SOCK="+d.ipcSock)
}

// holdMemory starts the installed example program in session id, with the
// installed interceptor preloaded as the SPANK plugin does, and returns once
// it holds count*64 MiB. It is killed at cleanup.
func (d *installedDaemon) holdMemory(id string, count int) *exec.Cmd {
	t := d.t
	t.Helper()
	cmd := exec.Command(exampleApp, "--step", "64M", "--count", fmt.Sprint(count), "--hold", "300")
	cmd.Env = append(d.env(), "LD_PRELOAD="+installedInterceptor, "GPUSLICE_SESSION="+id)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	held := make(chan error, 1)
	go func() {
		var seen []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.HasPrefix(sc.Text(), "event=hold ") {
				held <- nil
				io.Copy(io.Discard, stdout)
				return
			}
		}
		held <- fmt.Errorf("target_app ended before holding memory:\n%s", strings.Join(seen, "\n"))
	}()
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("target_app did not hold its memory within 30s")
	}
	return cmd
}

// start runs the installed daemon as the unit does (ExecStart), plus the
// private sockets and the installed fakecuda NVML; it returns once the
// installed CLI reaches it.
func (d *installedDaemon) start() {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("/usr/sbin/gpusliced", "--config", installedConf,
		"--ipc-socket", d.ipcSock, "--admin-socket", d.adminSock, "--nvml-library", installedNVML,
		"--cuda-library", filepath.Join(fakecudaDir, "libcuda.so.1"))
	cmd.Env = append(testenv.BaseEnv(), "FAKECUDA_DEVICES="+fakeDevices, "FAKECUDA_STATE="+d.state, "FAKECUDA_CTX_BYTES=0")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start installed gpusliced: %v", err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(d.done)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := exec.Command(installedCLI, "gpus")
		c.Env = d.env()
		out, err := c.CombinedOutput()
		if err == nil {
			return
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(d.log)
			t.Fatalf("installed gpusliced exited at start (%v):\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("installed gpuslice cannot reach the installed gpusliced: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM (SIGKILL after 15 s) and waits, as systemd's stop does.
func (d *installedDaemon) stop() {
	if d.cmd == nil {
		return
	}
	select {
	case <-d.done:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	d.cmd = nil
}

// cli runs the installed gpuslice command against this daemon.
func (d *installedDaemon) cli(args ...string) string {
	d.t.Helper()
	return run(d.t, d.env(), installedCLI, args...)
}

// session is the part of the admin API's session object the tests read.
type session struct {
	ID         string `json:"id"`
	UID        uint32 `json:"uid"`
	TTLSeconds int64  `json:"ttl_seconds"`
	GPUs       []struct {
		UUID       string `json:"uuid"`
		Index      int    `json:"index"`
		LimitBytes uint64 `json:"limit_bytes"`
		UsedBytes  uint64 `json:"used_bytes"`
	} `json:"gpus"`
}

func (d *installedDaemon) status(id string) session {
	d.t.Helper()
	var s session
	out := d.cli("status", "--json", id)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		d.t.Fatalf("gpuslice status --json: %v\n%s", err, out)
	}
	return s
}

// checkQuota asserts that session id exists with quotaMB on both fake GPUs.
func (d *installedDaemon) checkQuota(id string, quotaMB uint64) {
	d.t.Helper()
	s := d.status(id)
	if s.ID != id || len(s.GPUs) != 2 {
		d.t.Fatalf("session %s: %+v, want 2 GPUs", id, s)
	}
	for _, g := range s.GPUs {
		if g.LimitBytes != quotaMB*mib {
			d.t.Errorf("session %s GPU %s: limit %d, want %d", id, g.UUID, g.LimitBytes, quotaMB*mib)
		}
	}
}

// alive reports whether pid runs (a child that exited but was not waited
// for is a zombie: not alive).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// used is what session id uses on all its GPUs.
func (d *installedDaemon) used(id string) uint64 {
	d.t.Helper()
	var n uint64
	for _, g := range d.status(id).GPUs {
		n += g.UsedBytes
	}
	return n
}

// checkUsed asserts session id uses want bytes on GPU 0 and none on the
// others.
func (d *installedDaemon) checkUsed(id string, want uint64) {
	d.t.Helper()
	s := d.status(id)
	for _, g := range s.GPUs {
		w := uint64(0)
		if g.Index == 0 {
			w = want
		}
		if g.UsedBytes != w {
			d.t.Errorf("session %s: GPU %d uses %d bytes, want %d", id, g.Index, g.UsedBytes, w)
		}
	}
}

func TestInstalledPackage(t *testing.T) {
	p := packages(t)
	requireMachine(t)

	out := dpkgInstall(t, p.Deb, p.FakeDeb)
	t.Logf("dpkg --install:\n%s", out)
	for _, pkg := range []string{"gpuslice", "gpuslice-fakecuda"} {
		if got, want := dpkgStatus(t, pkg), "install ok installed "+p.Version+"-1"; got != want {
			t.Fatalf("%s: dpkg status %q, want %q", pkg, got, want)
		}
	}

	t.Run("unit enabled for the next boot", func(t *testing.T) {
		// deb-systemd-helper records the enablement even without a running
		// systemd (image builds); nothing was started.
		// Debian 12's deb-systemd-helper names the unit by its /lib path,
		// one directory with /usr/lib on a merged /usr.
		link := "/etc/systemd/system/multi-user.target.wants/gpusliced.service"
		target, err := os.Readlink(link)
		got, _ := filepath.EvalSymlinks(link)
		want, _ := filepath.EvalSymlinks(installedUnit)
		if err != nil || got == "" || got != want {
			t.Errorf("%s -> %q (%v), resolving to %q, want the installed unit %s", link, target, err, got, installedUnit)
		}
	})

	// This machine runs Debian 12's Slurm 22.05: its plugin is enabled,
	// and srun here loads it.
	t.Run("the plugin for this machine's Slurm is enabled", func(t *testing.T) {
		rels := slurmReleases(t, []string{"22.05"})
		if len(rels) == 0 {
			t.Skip("no Slurm on this machine")
		}
		want := "gpuslice: Slurm 22.05 (" + debPluginDir + "): SPANK plugin for 22.05 enabled"
		if !strings.Contains(out, want) {
			t.Errorf("dpkg --install did not say %q", want)
		}
		for link, target := range map[string]string{
			debPluginDir + "/gpuslice.so":               "../../gpuslice/spank/22.05/gpuslice.so",
			"/etc/slurm/plugstack.conf.d/gpuslice.conf": "../../gpuslice/plugstack.conf",
		} {
			if got, err := os.Readlink(link); err != nil || got != target {
				t.Errorf("%s -> %q (%v), want %s", link, got, err, target)
			}
		}
		checkLoads(t, rels[0], "/", debPluginDir)
	})

	// A package changing Debian's Slurm plugin directory (a Slurm upgrade)
	// triggers the selection: it puts back the link taken away here.
	t.Run("a change in Slurm's plugin directory selects again", func(t *testing.T) {
		if len(slurmReleases(t, []string{"22.05"})) == 0 {
			t.Skip("no Slurm on this machine")
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("gpuslice test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		nfpmPackage(t, dir, "deb", "name: gpuslice-test-slurm-file\nversion: 1.0\ndescription: a file in Slurm's plugin directory\n"+
			"contents:\n  - src: "+filepath.Join(dir, "marker")+"\n    dst: "+debPluginDir+"/gpuslice-test-marker\n")
		inc := "/etc/slurm/plugstack.conf.d/gpuslice.conf"
		if err := os.Remove(inc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { exec.Command("dpkg", "--purge", "gpuslice-test-slurm-file").Run() })
		out := run(t, nil, "dpkg", "--install", filepath.Join(dir, "gpuslice-test-slurm-file_1.0-1_amd64.deb"))
		want := "gpuslice: Slurm 22.05 (" + debPluginDir + "): SPANK plugin for 22.05 enabled"
		if !strings.Contains(out, "Processing triggers for gpuslice") || !strings.Contains(out, want) {
			t.Errorf("dpkg --install of a package with a file in %s: no trigger processed, or not %q:\n%s", debPluginDir, want, out)
		}
		if _, err := os.Readlink(inc); err != nil {
			t.Errorf("%s not made again: %v", inc, err)
		}
		out = run(t, nil, "dpkg", "--purge", "gpuslice-test-slurm-file")
		if got := gpusliceLines(out); len(got) != 0 {
			t.Errorf("dpkg --purge of the test package: gpuslice said %q with nothing changed", got)
		}
	})

	t.Run("programs report the version", func(t *testing.T) {
		for _, prog := range installedPrograms {
			out := run(t, nil, prog, "--version")
			if !strings.Contains(out, p.Version) {
				t.Errorf("%s --version: %q, want %s", prog, strings.TrimSpace(out), p.Version)
			}
		}
	})

	t.Run("libraries resolve", func(t *testing.T) {
		for _, lib := range []string{"/usr/lib/gpuslice/libgpuslice.so",
			debPluginDir + "/gpuslice.so", installedNVML,
			"/usr/lib/gpuslice/fakecuda/libcuda.so.1", "/usr/lib/gpuslice/fakecuda/libcudart.so.12"} {
			out := run(t, nil, "ldd", lib)
			if strings.Contains(out, "not found") {
				t.Errorf("ldd %s:\n%s", lib, out)
			}
		}
	})

	t.Run("systemd-analyze verify", func(t *testing.T) {
		need(t, "systemd-analyze")
		// The installed unit is etc/systemd/gpusliced.service; verifying it
		// here finds ExecStart= installed.
		if readFile(t, installedUnit) != readFile(t, filepath.Join(testenv.RepoRoot(t), "etc/systemd/gpusliced.service")) {
			t.Errorf("%s differs from etc/systemd/gpusliced.service", installedUnit)
		}
		// The exit code is not reliable: any output is a finding.
		cmd := exec.Command("systemd-analyze", "verify", installedUnit)
		cmd.Dir = "/"
		out, _ := cmd.CombinedOutput()
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("systemd-analyze verify %s:\n%s", installedUnit, s)
		}
	})

	t.Run("installed daemon and CLI", func(t *testing.T) {
		d := newInstalledDaemon(t)
		d.start()
		var gpus []struct {
			UUID          string `json:"uuid"`
			PhysicalBytes uint64 `json:"physical_bytes"`
		}
		out := d.cli("gpus", "--json")
		if err := json.Unmarshal([]byte(out), &gpus); err != nil {
			t.Fatalf("gpuslice gpus --json: %v\n%s", err, out)
		}
		if len(gpus) != 2 || gpus[0].PhysicalBytes != 80<<30 {
			t.Fatalf("gpus from the installed fakecuda NVML: %s", out)
		}
		// The installed configuration names the installed context probe.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			b, _ := os.ReadFile(d.log)
			if n := strings.Count(string(b), `msg="context cost measured"`); n == 2 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the installed daemon measured the context cost of %d GPUs, want 2; its log:\n%s", n, b)
			}
		}
		id := fmt.Sprintf("pkg-%d", os.Getpid())
		d.cli("allocate", "--uid", "0", "--gpu-mem", fmt.Sprintf("%dM", sessionQuotaMB), id)
		d.checkQuota(id, sessionQuotaMB)
		// The session lives in the installed configuration's directories.
		if _, err := os.Stat(filepath.Join(stateDir, "gpusliced.db")); err != nil {
			t.Errorf("session store: %v", err)
		}
		if !strings.Contains(d.cli("list"), id) {
			t.Errorf("gpuslice list does not show %s", id)
		}

		// A job under a quota: the installed CLI preloads the installed
		// interceptor into an installed example program on fakecuda.
		out = d.cli("run", "--gpu-mem", fmt.Sprintf("%dM", sessionQuotaMB), "--",
			exampleApp, "--step", "64M", "--count", "8")
		t.Logf("gpuslice run -- target_app:\n%s", out)
		for _, want := range []string{
			fmt.Sprintf("event=meminfo when=before free=%d total=%d", sessionQuotaMB*mib, sessionQuotaMB*mib),
			fmt.Sprintf("event=summary allowed=%d denied=%d", sessionQuotaMB/64, 8-sessionQuotaMB/64),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("gpuslice run target_app: no %q in:\n%s", want, out)
			}
		}

		d.cli("release", id)
		c := exec.Command(installedCLI, "status", id)
		c.Env = d.env()
		var ee *exec.ExitError
		if err := c.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("status of a released session: %v, want exit code 2 (not found)", err)
		}
		d.stop()
	})

	t.Run("remove keeps configuration and state, purge deletes them", func(t *testing.T) {
		out := run(t, nil, "dpkg", "--remove", "gpuslice")
		if rels := slurmReleases(t, []string{"22.05"}); len(rels) > 0 {
			if got := gpusliceLines(out); len(got) != 1 || !strings.Contains(got[0], "SPANK plugin disabled") {
				t.Errorf("dpkg --remove: gpuslice said %q, want one line: SPANK plugin disabled", got)
			}
			// Slurm's commands work without the plugin.
			checkWorksWithout(t, rels[0], "/", debPluginDir)
		}
		for _, gone := range []string{debPluginDir + "/gpuslice.so", "/etc/slurm/plugstack.conf.d/gpuslice.conf"} {
			if _, err := os.Lstat(gone); err == nil {
				t.Errorf("%s still there after remove", gone)
			}
		}
		if got := dpkgStatus(t, "gpuslice"); !strings.HasPrefix(got, "deinstall ok config-files") {
			t.Errorf("after remove: %q", got)
		}
		for _, gone := range installedPrograms {
			if _, err := os.Stat(gone); err == nil {
				t.Errorf("%s still there after remove", gone)
			}
		}
		for _, kept := range []string{installedConf, "/etc/gpuslice/plugstack.conf", stateDir} {
			if _, err := os.Stat(kept); err != nil {
				t.Errorf("remove deleted %s: %v", kept, err)
			}
		}
		run(t, nil, "dpkg", "--purge", "gpuslice")
		if got := dpkgStatus(t, "gpuslice"); got != "" && !strings.HasSuffix(got, "not-installed") {
			t.Errorf("after purge: %q", got)
		}
		for _, gone := range []string{"/etc/gpuslice", "/etc/slurm/plugstack.conf.d/gpuslice.conf", stateDir, runtimeDir,
			"/etc/systemd/system/multi-user.target.wants/gpusliced.service", "/etc/systemd/system/gpusliced.service"} {
			if _, err := os.Lstat(gone); err == nil {
				t.Errorf("%s still there after purge", gone)
			}
		}
	})
}

func TestUpgrade(t *testing.T) {
	requireMachine(t)
	// Two builds of the same tree with ordered versions, as a site would get
	// from two releases.
	oldPkgs, newPkgs := upgradePair(t)

	dpkgInstall(t, oldPkgs.Deb, oldPkgs.FakeDeb)
	if got := dpkgStatus(t, "gpuslice"); got != "install ok installed 0.1.0-1" {
		t.Fatalf("dpkg status %q", got)
	}

	// The site edits the configuration.
	conf := readFile(t, installedConf)
	if !strings.Contains(conf, "\ndefault_ttl: 24h\n") {
		t.Fatalf("%s has no 'default_ttl: 24h' line to edit:\n%s", installedConf, conf)
	}
	edited := strings.Replace(conf, "\ndefault_ttl: 24h\n", "\n# site: jobs run up to 36 hours\ndefault_ttl: 36h\n", 1)
	if err := os.WriteFile(installedConf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	// A running daemon holds a session of a running job.
	d := newInstalledDaemon(t)
	d.start()
	id := fmt.Sprintf("upg-%d", os.Getpid())
	d.cli("allocate", "--uid", "0", "--gpu-mem", fmt.Sprintf("%dM", sessionQuotaMB), id)
	d.checkQuota(id, sessionQuotaMB)
	job := d.holdMemory(id, 2)
	d.checkUsed(id, 2*64*mib)

	out := dpkgInstall(t, newPkgs.Deb, newPkgs.FakeDeb)
	t.Logf("upgrade:\n%s", out)
	if got := dpkgStatus(t, "gpuslice"); got != "install ok installed 0.1.1-1" {
		t.Fatalf("after upgrade: dpkg status %q", got)
	}
	if got := readFile(t, installedConf); got != edited {
		t.Errorf("upgrade changed the edited %s:\n%s", installedConf, got)
	}
	leftovers, _ := filepath.Glob("/etc/gpuslice/*.dpkg-*")
	if len(leftovers) > 0 {
		t.Errorf("upgrade left %v", leftovers)
	}

	// What postinst does under systemd: restart the daemon (new binary,
	// same configuration, state and runtime directories).
	d.stop()
	d.start()
	d.checkQuota(id, sessionQuotaMB)
	if !strings.Contains(d.cli("list"), id) {
		t.Errorf("session %s lost across the upgrade", id)
	}
	// The job's process, attached before the upgrade, is still accounted.
	d.checkUsed(id, 2*64*mib)
	if !alive(job.Process.Pid) {
		t.Errorf("the job's process ended during the upgrade")
	}
	// ... and the restarted daemon still watches it: its memory comes back
	// when it dies.
	job.Process.Kill()
	job.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for d.used(id) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	d.checkUsed(id, 0)

	// The restarted daemon runs with the edited configuration.
	d.cli("allocate", "--uid", "0", "--gpu-mem", "64M", id+"-new")
	if s := d.status(id + "-new"); s.TTLSeconds != 36*3600 {
		t.Errorf("session created after the upgrade has TTL %ds, want %ds (default_ttl: 36h)", s.TTLSeconds, 36*3600)
	}
	d.cli("release", id+"-new")
	d.cli("release", id)
	d.stop()
}
