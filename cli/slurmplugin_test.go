package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// gpuslice slurm-plugin on a scratch root (--root) holding Slurm plugins
// and gpuslice plugins compiled here: each a shared object with the
// plugin_type and plugin_version Slurm's loader reads. Loading the packaged
// plugins into each real Slurm release's srun is tests/packaging's.

type pluginRoot struct {
	t    *testing.T
	root string
	src  string // scratch sources
	n    int
}

func newPluginRoot(t *testing.T) *pluginRoot {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed")
	}
	r := &pluginRoot{t: t, root: t.TempDir(), src: t.TempDir()}
	// The package's plugins and line.
	r.plugin(spankPluginsDir+"/22.05/gpuslice.so", "spank", 0x160508)
	r.plugin(spankPluginsDir+"/23.11/gpuslice.so", "spank", 0x170b0b)
	r.write(spankConfFile, "required gpuslice.so socket=/run/gpuslice/ipc.sock\n")
	return r
}

func (r *pluginRoot) path(p string) string { return filepath.Join(r.root, p) }

func (r *pluginRoot) write(p, body string) {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Dir(r.path(p)), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(r.path(p), []byte(body), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// plugin compiles a plugin of the given type and version at p (under the
// root); extra is added to its source and gcc's arguments.
func (r *pluginRoot) plugin(p, typ string, version uint32, extra ...string) {
	r.t.Helper()
	r.n++
	src := filepath.Join(r.src, fmt.Sprintf("p%d.c", r.n))
	code := fmt.Sprintf("const char plugin_name[] = \"test\";\nconst char plugin_type[] = %q;\n"+
		"const unsigned int plugin_version = %#x;\n", typ, version)
	var args []string
	for _, e := range extra {
		if strings.HasPrefix(e, "-") || strings.HasPrefix(e, "/") {
			args = append(args, e)
		} else {
			code += e + "\n"
		}
	}
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(r.path(p)), 0o755); err != nil {
		r.t.Fatal(err)
	}
	out, err := exec.Command("gcc", append([]string{"-shared", "-fPIC", "-o", r.path(p), src}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("gcc: %v\n%s", err, out)
	}
}

// slurm installs Slurm's plugins of a release in dir, in place of those there.
func (r *pluginRoot) slurm(dir string, version uint32) {
	r.t.Helper()
	old, _ := filepath.Glob(r.path(filepath.Join(dir, "*_*.so")))
	for _, f := range old {
		os.Remove(f)
	}
	r.plugin(filepath.Join(dir, "auth_test.so"), "auth/test", version)
	r.plugin(filepath.Join(dir, "select_test.so"), "select/test", version)
}

// run runs gpuslice slurm-plugin on the root; it returns stdout, stderr and
// the exit status.
func (r *pluginRoot) run(args ...string) (string, string, int) {
	r.t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"slurm-plugin", "--root", r.root}, args...), nil, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func (r *pluginRoot) link(p string) string {
	r.t.Helper()
	t, err := os.Readlink(r.path(p))
	if err != nil {
		return ""
	}
	return t
}

func oneLine(t *testing.T, what, s string, want ...string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Fatalf("%s: want one line, got %q", what, s)
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Fatalf("%s: %q lacks %q", what, s, w)
		}
	}
}

const (
	rpmDir  = "/usr/lib64/slurm"
	incLink = "/etc/slurm/plugstack.conf.d/gpuslice.conf"
)

func TestSlurmPluginFollowsTheRelease(t *testing.T) {
	r := newPluginRoot(t)

	out, errOut, code := r.run()
	oneLine(t, "no Slurm", out+errOut, "no Slurm found", rpmDir, "not enabled", "Slurm's commands work")
	if code != ExitNotFound {
		t.Errorf("no Slurm: exit status %d, want %d", code, ExitNotFound)
	}

	// SchedMD's 23.11, with a SPANK plugin of an older release left behind.
	r.slurm(rpmDir, 0x170b0b)
	r.plugin(rpmDir+"/spank_old.so", "spank", 0x160508)
	out, errOut, code = r.run()
	oneLine(t, "23.11", out+errOut, "Slurm 23.11 ("+rpmDir+"): SPANK plugin for 23.11 enabled",
		"created /etc/slurm/plugstack.conf including /etc/slurm/plugstack.conf.d/*.conf")
	if code != 0 || errOut != "" {
		t.Fatalf("23.11: exit status %d, stderr %q", code, errOut)
	}
	if got := r.link(rpmDir + "/gpuslice.so"); got != "../../lib/gpuslice/spank/23.11/gpuslice.so" {
		t.Errorf("plugin link -> %q", got)
	}
	if got := r.link(incLink); got != "../../gpuslice/plugstack.conf" {
		t.Errorf("plugstack.conf.d link -> %q", got)
	}
	if b, _ := os.ReadFile(r.path("/etc/slurm/plugstack.conf")); !strings.Contains(string(b), "\ninclude /etc/slurm/plugstack.conf.d/*.conf\n") {
		t.Errorf("plugstack.conf:\n%s", b)
	}

	// Nothing changed: --quiet says nothing.
	if out, errOut, code = r.run("--quiet"); out+errOut != "" || code != 0 {
		t.Errorf("again, --quiet: exit status %d, printed %q", code, out+errOut)
	}

	// Upgraded to 22.05's plugins (a downgrade, as good a change).
	r.slurm(rpmDir, 0x160508)
	out, _, code = r.run("--quiet")
	oneLine(t, "22.05", out, "SPANK plugin for 22.05 enabled (was the one for 23.11)")
	if got := r.link(rpmDir + "/gpuslice.so"); code != 0 || got != "../../lib/gpuslice/spank/22.05/gpuslice.so" {
		t.Errorf("22.05: exit status %d, plugin link -> %q", code, got)
	}

	// A release the package has no plugin for: both links go, one line.
	r.slurm(rpmDir, 0x180508)
	out, errOut, code = r.run("--quiet")
	oneLine(t, "24.05", out+errOut, "Slurm 24.05 ("+rpmDir+") is not supported: the package has plugins for 22.05, 23.11",
		"SPANK plugin disabled")
	if code != ExitNotFound || out != "" {
		t.Errorf("24.05: exit status %d, stdout %q", code, out)
	}
	for _, p := range []string{rpmDir + "/gpuslice.so", incLink} {
		if _, err := os.Lstat(r.path(p)); err == nil {
			t.Errorf("%s still there", p)
		}
	}
	if out, errOut, _ = r.run("--quiet"); out+errOut != "" {
		t.Errorf("24.05 again, --quiet: printed %q", out+errOut)
	}

	// Back to 23.11, then the package is removed.
	r.slurm(rpmDir, 0x170b0b)
	r.run()
	out, _, code = r.run("--disable")
	oneLine(t, "--disable", out, "SPANK plugin disabled")
	if _, err := os.Lstat(r.path(incLink)); err == nil || code != 0 {
		t.Errorf("--disable: exit status %d, %s still there", code, incLink)
	}
	if out, errOut, _ = r.run("--disable", "--quiet"); out+errOut != "" {
		t.Errorf("--disable --quiet with nothing to disable printed %q", out+errOut)
	}
}

// Where slurm.conf says: its PluginDir, and its PlugStackConfig, which
// does not read plugstack.conf.d (what to add is said).
func TestSlurmPluginReadsSlurmConf(t *testing.T) {
	r := newPluginRoot(t)
	r.slurm("/opt/slurm/lib/slurm", 0x170b0b)
	r.slurm(rpmDir, 0x160508) // not the one slurm.conf names
	r.write("/etc/slurm/slurm.conf", "ClusterName=c\n# PluginDir=/nowhere\nPluginDir = /opt/slurm/lib/slurm:/opt/more\n"+
		"PlugStackConfig=/etc/slurm/spank.conf\n")
	r.write("/etc/slurm/spank.conf", "required /opt/other.so\n")
	out, _, code := r.run()
	oneLine(t, "slurm.conf", out, "Slurm 23.11 (/opt/slurm/lib/slurm): SPANK plugin for 23.11 enabled",
		"/etc/slurm/spank.conf does not read it: add 'include /etc/slurm/plugstack.conf.d/*.conf' there")
	if got := r.link("/opt/slurm/lib/slurm/gpuslice.so"); code != 0 || got != "../../../../usr/lib/gpuslice/spank/23.11/gpuslice.so" {
		t.Errorf("exit status %d, plugin link -> %q", code, got)
	}
	if _, err := os.Lstat(r.path(rpmDir + "/gpuslice.so")); err == nil {
		t.Errorf("linked into %s too", rpmDir)
	}

	// SLURM_CONF names another slurm.conf: its directory holds plugstack.conf.
	r.write("/site/slurm.conf", "PluginDir="+rpmDir+"\n")
	t.Setenv("SLURM_CONF", "/site/slurm.conf")
	out, _, code = r.run()
	oneLine(t, "SLURM_CONF", out, "Slurm 22.05 ("+rpmDir+")", "created /site/plugstack.conf")
	if got := r.link("/site/plugstack.conf.d/gpuslice.conf"); code != 0 || got != "../../etc/gpuslice/plugstack.conf" {
		t.Errorf("exit status %d, plugstack.conf.d link -> %q", code, got)
	}
}

// A Slurm built from source under /usr/local on a host that also has
// another Slurm's plugins (Debian's, left from before): naming the
// source build's slurm.conf (SLURM_CONF=/usr/local/etc/slurm.conf, no
// PluginDir in it, as docs/install.md says) selects the plugin for the
// source build, in its PluginDir, not the other's.
func TestSlurmPluginSourceBuildBesideAnother(t *testing.T) {
	r := newPluginRoot(t)
	r.slurm("/usr/local/lib/slurm", 0x170b0b)
	r.slurm("/usr/lib/x86_64-linux-gnu/slurm-wlm", 0x160508)
	r.write("/usr/local/etc/slurm.conf", "ClusterName=c\n")
	t.Setenv("SLURM_CONF", "/usr/local/etc/slurm.conf")
	out, _, code := r.run()
	oneLine(t, "source build", out, "Slurm 23.11 (/usr/local/lib/slurm): SPANK plugin for 23.11 enabled", "created /usr/local/etc/plugstack.conf")
	if got := r.link("/usr/local/lib/slurm/gpuslice.so"); code != 0 || got != "../../../lib/gpuslice/spank/23.11/gpuslice.so" {
		t.Errorf("exit status %d, plugin link -> %q", code, got)
	}
	if _, err := os.Lstat(r.path("/usr/lib/x86_64-linux-gnu/slurm-wlm/gpuslice.so")); err == nil {
		t.Errorf("linked into Debian's plugin directory too")
	}
}

// Files the package did not make are left alone: a plugin installed by
// hand where the link would go (nothing is enabled), the site's own
// plugstack.conf.d/gpuslice.conf (kept, and said).
func TestSlurmPluginLeavesSiteFiles(t *testing.T) {
	r := newPluginRoot(t)
	r.slurm(rpmDir, 0x170b0b)
	r.write(rpmDir+"/gpuslice.so", "by hand\n")
	out, errOut, code := r.run()
	oneLine(t, "plugin by hand", errOut, rpmDir+"/gpuslice.so is not the package's link", "left as is", "not enabled")
	if b, _ := os.ReadFile(r.path(rpmDir + "/gpuslice.so")); code != ExitNotFound || out != "" || string(b) != "by hand\n" {
		t.Errorf("exit status %d, stdout %q, the file now %q", code, out, b)
	}
	if _, err := os.Lstat(r.path(incLink)); err == nil {
		t.Errorf("%s made though no plugin is linked", incLink)
	}

	os.Remove(r.path(rpmDir + "/gpuslice.so"))
	r.write(incLink, "required gpuslice.so\n")
	out, _, code = r.run()
	oneLine(t, "site's line", out, "SPANK plugin for 23.11 enabled", incLink+" is the site's own file, kept")
	if b, _ := os.ReadFile(r.path(incLink)); code != 0 || string(b) != "required gpuslice.so\n" {
		t.Errorf("exit status %d, %s now %q", code, incLink, b)
	}
	_, errOut, _ = r.run("--disable")
	oneLine(t, "--disable", errOut, "but "+incLink+" (not the package's link) still loads it")
}

// Slurm's plugins of two releases in equal numbers: no release is taken.
func TestSlurmPluginMixedReleases(t *testing.T) {
	r := newPluginRoot(t)
	r.plugin(rpmDir+"/auth_a.so", "auth/a", 0x170b0b)
	r.plugin(rpmDir+"/auth_b.so", "auth/b", 0x160508)
	_, errOut, code := r.run()
	oneLine(t, "mixed", errOut, "cannot tell Slurm's release from its plugins in "+rpmDir+" (1 of 22.05, 1 of 23.11)")
	if code != ExitNotFound {
		t.Errorf("exit status %d", code)
	}
	r.plugin(rpmDir+"/auth_c.so", "auth/c", 0x170b02)
	if _, _, code = r.run(); code != 0 {
		t.Errorf("two of 23.11 and one of 22.05: exit status %d", code)
	}
}

// A plugin needing a C library version the host's lacks is not enabled.
func TestSlurmPluginNeedsTheHostsCLibrary(t *testing.T) {
	r := newPluginRoot(t)
	triplet := multiarch(runtime.GOARCH)
	hostLibc := "/lib/" + triplet + "/libc.so.6"
	if _, err := os.Stat(hostLibc); triplet == "" || err != nil {
		t.Skipf("no C library at %s", hostLibc)
	}
	// A C library defining GLIBC_2.99, to link the plugin against.
	fake := filepath.Join(r.src, "fakelibc")
	os.MkdirAll(fake, 0o755)
	os.WriteFile(filepath.Join(fake, "f.c"), []byte("int gs_new_call(void) { return 1; }\n"), 0o644)
	os.WriteFile(filepath.Join(fake, "f.map"), []byte("GLIBC_2.2.5 { local: *; };\nGLIBC_2.99 { global: gs_new_call; } GLIBC_2.2.5;\n"), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libc.so.6",
		"-Wl,--version-script="+filepath.Join(fake, "f.map"), "-o", filepath.Join(fake, "libc.so.6"), filepath.Join(fake, "f.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r.plugin(spankPluginsDir+"/24.05/gpuslice.so", "spank", 0x180508,
		"extern int gs_new_call(void); int gs_use(void) { return gs_new_call(); }", "-nostdlib", filepath.Join(fake, "libc.so.6"))
	r.slurm(rpmDir, 0x180508)
	b, err := os.ReadFile(hostLibc)
	if err != nil {
		t.Fatal(err)
	}
	r.write(hostLibc, string(b))

	_, errOut, code := r.run()
	oneLine(t, "GLIBC_2.99", errOut, "Slurm 24.05 ("+rpmDir+"): its plugin needs GLIBC_2.99, which this host's C library ("+hostLibc+") lacks",
		"not enabled")
	if _, err := os.Lstat(r.path(rpmDir + "/gpuslice.so")); code != ExitNotFound || err == nil {
		t.Errorf("exit status %d, plugin linked: %v", code, err == nil)
	}
}
