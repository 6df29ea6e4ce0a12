package packaging

// One package loads into whichever supported Slurm release the host runs:
// the packages carry the plugin of every release and `gpuslice
// slurm-plugin`, run by their scripts and Slurm triggers, enables the one
// for the host's release, or none. Checked with each release's own srun.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// packagedReleases lists the releases whose plugin a package payload holds
// (unpacked under root), checking each plugin was built for its directory.
func packagedReleases(t *testing.T, root string) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(root, "usr/lib/gpuslice/spank/*/gpuslice.so"))
	var out []string
	for _, p := range paths {
		rel := filepath.Base(filepath.Dir(p))
		v := soPluginVersion(t, p)
		if got := fmt.Sprintf("%d.%02d", v>>16&0xff, v>>8&0xff); got != rel {
			t.Errorf("%s was built for Slurm %s (plugin_version %#x)", p, got, v)
		}
		out = append(out, rel)
	}
	slices.Sort(out)
	return out
}

// selectPlugin runs the packaged gpuslice slurm-plugin on root and returns
// its lines and exit status.
func selectPlugin(t *testing.T, root string, args ...string) ([]string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "usr/bin/gpuslice"), append([]string{"slurm-plugin", "--root", root}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return lines(string(out)), 0
	case errors.As(err, &ee):
		return lines(string(out)), ee.ExitCode()
	}
	t.Fatalf("gpuslice slurm-plugin %v: %v\n%s", args, err, out)
	return nil, 0
}

// checkLines: exactly one line, holding every want.
func checkLines(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%s printed %d lines, want one:\n%s", what, len(got), strings.Join(got, "\n"))
	}
	for _, w := range want {
		if !strings.Contains(got[0], w) {
			t.Fatalf("%s: %q lacks %q", what, got[0], w)
		}
	}
}

// noLinks: neither the plugin's link nor the plugstack.conf.d link is there.
func noLinks(t *testing.T, root, pluginDir string) {
	t.Helper()
	for _, p := range []string{filepath.Join(pluginDir, "gpuslice.so"), "/etc/slurm/plugstack.conf.d/gpuslice.conf"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Fatalf("%s is still there", p)
		}
	}
}

// The .deb's payload in a scratch root and its own gpuslice slurm-plugin,
// as its trigger runs it after each Slurm upgrade: through every release
// here, in order, the plugin for that release is enabled and that
// release's srun loads it; run again, it says nothing; a release whose
// plugin needs a newer C library than the host's is not enabled; --disable
// leaves srun working without the plugin.
func TestSlurmPluginSelection(t *testing.T) {
	need(t, "dpkg-deb")
	if os.Getuid() != 0 {
		t.Skip("needs root (Debian 13's srun runs in its root)")
	}
	p := packages(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "dpkg-deb", "-x", p.Deb, root)
	carried := packagedReleases(t, root)
	if want := buildReleases(t); !slices.Equal(carried, want) {
		t.Errorf("the package carries the plugins of %v, the build has %v", carried, want)
	}

	got, code := selectPlugin(t, root)
	checkLines(t, "without Slurm", got, "no Slurm found", "not enabled", "Slurm's commands work")
	if code != 2 {
		t.Errorf("without Slurm: exit status %d, want 2", code)
	}
	noLinks(t, root, debPluginDir)

	rels := slurmReleases(t, carried)
	if len(rels) == 0 {
		t.Skip("no Slurm release's srun is here to load the plugin")
	}
	prev := ""
	for _, r := range rels {
		installSlurm(t, root, debPluginDir, r)
		got, code := selectPlugin(t, root, "--quiet")
		want := []string{"Slurm " + r.name + " (" + debPluginDir + "): SPANK plugin for " + r.name + " enabled"}
		if prev != "" {
			want = append(want, "(was the one for "+prev+")")
		}
		checkLines(t, "Slurm "+r.name, got, want...)
		if code != 0 {
			t.Fatalf("Slurm %s: exit status %d", r.name, code)
		}
		checkLoads(t, r, root, debPluginDir)
		if got, code := selectPlugin(t, root, "--quiet"); len(got) != 0 || code != 0 {
			t.Fatalf("Slurm %s, again: exit status %d, printed %q", r.name, code, got)
		}
		t.Logf("Slurm %s: enabled, srun --help shows --gpu-mem", r.name)
		prev = r.name
	}
	last := rels[len(rels)-1]

	if i := slices.IndexFunc(rels, func(r slurmRel) bool { return r.name == "24.11" }); i >= 0 {
		// 24.11 on a host with Debian 12's C library (EL 9's is older
		// still): the plugin is built against 24.11's headers with this
		// machine's C library, not inside Debian 13 (it then needed
		// GLIBC_2.38 and was refused here), so it is enabled.
		r := rels[i]
		r.libc = "/lib/x86_64-linux-gnu/libc.so.6"
		installSlurm(t, root, debPluginDir, r)
		got, code := selectPlugin(t, root, "--quiet")
		checkLines(t, "Slurm 24.11 with glibc 2.36", got, "Slurm 24.11", "enabled")
		if code != 0 {
			t.Errorf("Slurm 24.11 with glibc 2.36: exit status %d, want 0", code)
		}
		installSlurm(t, root, debPluginDir, last)
		selectPlugin(t, root, "--quiet")
	}

	got, code = selectPlugin(t, root, "--disable")
	checkLines(t, "--disable", got, "SPANK plugin disabled")
	if code != 0 {
		t.Errorf("--disable: exit status %d", code)
	}
	noLinks(t, root, debPluginDir)
	checkWorksWithout(t, last, root, debPluginDir)
	if _, err := os.Stat(filepath.Join(root, "etc/gpuslice/plugstack.conf")); err != nil {
		t.Errorf("--disable removed the plugin's line: %v", err)
	}
}

// minimalRoot makes a root where rpm can run the package's scriptlets
// (chrooted): /bin/sh and the C library the packaged programs need.
func minimalRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"tmp", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"/bin/sh"}
	for _, prog := range []string{"/bin/sh", filepath.Join(testenv.BuildDir(t), "bin", "gpuslice")} {
		for _, f := range strings.Fields(run(t, nil, "ldd", prog)) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		copyFile(t, f, filepath.Join(root, f))
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	return root
}

// fakeSlurmRPM builds a package named slurm, of r's version, holding r's
// sample plugins in /usr/lib64/slurm: what fires the .rpm's triggers.
func fakeSlurmRPM(t *testing.T, dir string, r slurmRel) string {
	t.Helper()
	info, err := os.ReadFile(filepath.Join(testenv.BuildDir(t), "slurm", r.name, "BUILD-INFO"))
	if err != nil {
		t.Fatal(err)
	}
	version := r.name + ".0"
	for _, l := range lines(string(info)) {
		if v, ok := strings.CutPrefix(l, "version "); ok {
			version = v
		}
	}
	var contents strings.Builder
	for _, p := range slurmPluginSample {
		fmt.Fprintf(&contents, "  - src: %s\n    dst: /usr/lib64/slurm/%s\n    file_info: {mode: 0755}\n",
			filepath.Join(r.hostPlugins, p), p)
	}
	nfpmPackage(t, dir, "rpm", "name: slurm\nversion: "+version+"\ndescription: Slurm's plugins (a stand-in)\n"+
		"contents:\n"+contents.String())
	return filepath.Join(dir, "slurm-"+version+"-1.x86_64.rpm")
}

// nfpmPackage builds a package of the given nfpm configuration (name,
// version, description and contents) into dir with the pinned nfpm.
func nfpmPackage(t *testing.T, dir, packager, config string) {
	t.Helper()
	conf, err := os.CreateTemp(dir, "nfpm-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body := config + "version_schema: none\narch: amd64\nplatform: linux\nrelease: 1\nmaintainer: test <test@gpuslice.invalid>\nlicense: GPL-2.0\n"
	if _, err := conf.WriteString(body); err != nil {
		t.Fatal(err)
	}
	conf.Close()
	repo := testenv.RepoRoot(t)
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(repo, "tools", "go.mod"), "nfpm", "package",
		"--config", conf.Name(), "--packager", packager, "--target", dir+"/")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nfpm:\n%s\n%v\n%s", body, err, out)
	}
}

// gpusliceLines are the lines gpuslice slurm-plugin printed through rpm.
func gpusliceLines(out string) []string {
	var got []string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "gpuslice:") {
			got = append(got, l)
		}
	}
	return got
}

// The .rpm in a scratch root, its scriptlets and triggers run by rpm as on
// an EL node, with SchedMD's layout (/usr/lib64/slurm, /etc/slurm): an
// older gpuslice, which lacks the newest release's plugin, installed before
// Slurm enables nothing; Slurm installed: its plugin is enabled
// (%triggerin) and its srun loads it; Slurm upgraded to the newest release:
// disabled, and that srun works; gpuslice upgraded: enabled for it (%post);
// Slurm removed: disabled (%triggerpostun); gpuslice removed. Each step says
// one line.
func TestRPMSlurmTriggers(t *testing.T) {
	need(t, "rpm", "ldd")
	if os.Getuid() != 0 {
		t.Skip("needs root (rpm runs the scriptlets chrooted)")
	}
	oldPkgs, newPkgs := upgradePair(t)
	for _, s := range []string{"in", "postun"} {
		if !strings.Contains(run(t, nil, "rpm", "-qp", "--triggers", newPkgs.RPM), "trigger"+s+" scriptlet (using /bin/sh) -- slurm, slurm-ohpc") {
			t.Fatalf("gpuslice.rpm has no %%trigger%s on slurm, slurm-ohpc:\n%s", s, run(t, nil, "rpm", "-qp", "--triggers", newPkgs.RPM))
		}
	}
	older, newer := newestSchedMDPair(t, buildReleases(t))
	dir := t.TempDir()
	slurmOld, slurmNew := fakeSlurmRPM(t, dir, older), fakeSlurmRPM(t, dir, newer)

	root := minimalRoot(t)
	rpmRoot(t, root, "--initdb")
	step := func(what string, args ...string) []string {
		t.Helper()
		got := gpusliceLines(rpmRoot(t, root, args...))
		t.Logf("%s: %q", what, got)
		return got
	}
	const pd = "/usr/lib64/slurm"

	got := step("gpuslice 0.1.0 without Slurm", "-i", "--nodeps", oldPkgs.RPM)
	checkLines(t, "install without Slurm", got, "no Slurm found", "not enabled")

	got = step("Slurm "+older.name, "-i", "--nodeps", slurmOld)
	checkLines(t, "Slurm "+older.name+" installed", got, "Slurm "+older.name+" ("+pd+"): SPANK plugin for "+older.name+" enabled",
		"created /etc/slurm/plugstack.conf")
	checkLoads(t, older, root, pd)

	got = step("Slurm "+newer.name, "-U", "--nodeps", slurmNew)
	checkLines(t, "Slurm upgraded to "+newer.name, got, "Slurm "+newer.name+" ("+pd+") is not supported", "SPANK plugin disabled",
		"Slurm's commands work")
	noLinks(t, root, pd)
	checkWorksWithout(t, newer, root, pd)

	got = step("gpuslice 0.1.1", "-U", "--nodeps", newPkgs.RPM)
	checkLines(t, "gpuslice upgraded", got, "Slurm "+newer.name+" ("+pd+"): SPANK plugin for "+newer.name+" enabled")
	checkLoads(t, newer, root, pd)

	got = step("Slurm removed", "-e", "--nodeps", "slurm")
	checkLines(t, "Slurm removed", got, "no Slurm found", "SPANK plugin disabled")
	noLinks(t, root, pd)

	if got = step("gpuslice removed", "-e", "--nodeps", "gpuslice"); len(got) != 0 {
		t.Errorf("rpm -e gpuslice printed %q", got)
	}
	for _, gone := range []string{"usr/bin/gpuslice", "usr/lib/gpuslice/spank", "etc/gpuslice/plugstack.conf"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("/%s is still there after rpm -e", gone)
		}
	}
}
