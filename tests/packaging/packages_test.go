// Package packaging tests the .deb and .rpm packages built by
// `make packages` (packaging/build-packages.sh: nfpm for the .deb, rpmbuild
// and packaging/gpuslice.spec for the .rpm): their contents and metadata,
// lintian, rpm -K, the maintainer scripts, and — as root, with dpkg on this
// machine — install, run, upgrade and purge; and the release tarball of
// `make dist` built with rpmbuild -ta and make release-deb. `make install`
// is tested into a scratch DESTDIR.
//
// Environment (set by `make test-packages`):
//
//	GPUSLICE_BUILD_DIR    the build directory (default <repo>/build)
//	GPUSLICE_DIST_DIR     where `make packages` put the packages; when unset
//	                      the suite builds its own into a temporary directory
//	GPUSLICE_PKG_VERSION  their version (default: packaging/version.sh)
package packaging

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Architecture names of this machine's packages, and the directory where
// Debian's slurmd looks for plugins.
var debArch, rpmArch, debPluginDir = func() (string, string, string) {
	switch runtime.GOARCH {
	case "arm64":
		return "arm64", "aarch64", "/usr/lib/aarch64-linux-gnu/slurm-wlm"
	case "ppc64le":
		return "ppc64el", "ppc64le", "/usr/lib/powerpc64le-linux-gnu/slurm-wlm"
	default:
		return "amd64", "x86_64", "/usr/lib/x86_64-linux-gnu/slurm-wlm"
	}
}()

// pkgSet is one build of the two packages in both formats.
type pkgSet struct {
	Version      string // upstream version (without the -1 revision)
	Deb, FakeDeb string
	RPM, FakeRPM string
	dir          string
}

var (
	mainPkgsOnce sync.Once
	mainPkgs     pkgSet
	mainPkgsErr  error
	ownDist      string // packages this suite built itself, removed at the end

	pairOnce sync.Once
	pairOld  pkgSet
	pairNew  pkgSet
	pairErr  error
	pairDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{ownDist, pairDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// upgradePair builds the packages twice from the same build, as versions
// 0.1.0 and 0.1.1, for the upgrade tests. 0.1.0 lacks the plugin of the
// newest Slurm release (when the build has more than one), as a gpuslice
// older than that release would.
func upgradePair(t *testing.T) (old, new pkgSet) {
	t.Helper()
	root := testenv.RepoRoot(t)
	build := testenv.BuildDir(t)
	releases := buildReleases(t)
	pairOnce.Do(func() {
		pairDir, pairErr = os.MkdirTemp("", "gpuslice-upgrade-")
		if pairErr != nil {
			return
		}
		oldReleases := releases
		if len(releases) > 1 {
			oldReleases = releases[:len(releases)-1]
		}
		for _, v := range []struct {
			version  string
			releases []string
			set      *pkgSet
		}{{"0.1.0", oldReleases, &pairOld}, {"0.1.1", releases, &pairNew}} {
			dir := filepath.Join(pairDir, v.version)
			env := []string{"GPUSLICE_SLURM_RELEASES=" + strings.Join(v.releases, " ")}
			if pairErr = buildPackages(root, build, v.version, dir, env, "deb", "rpm"); pairErr != nil {
				return
			}
			if *v.set, pairErr = findPackages(dir, v.version); pairErr != nil {
				return
			}
		}
	})
	if pairErr != nil {
		t.Fatalf("upgrade packages: %v", pairErr)
	}
	return pairOld, pairNew
}

// packages returns the packages under test: those of `make packages`
// (GPUSLICE_DIST_DIR), or a set the suite builds itself.
func packages(t *testing.T) pkgSet {
	t.Helper()
	root := testenv.RepoRoot(t)
	build := testenv.BuildDir(t)
	mainPkgsOnce.Do(func() {
		version := os.Getenv("GPUSLICE_PKG_VERSION")
		if version == "" {
			out, err := exec.Command(filepath.Join(root, "packaging", "version.sh")).Output()
			if err != nil {
				mainPkgsErr = fmt.Errorf("packaging/version.sh: %v", err)
				return
			}
			version = strings.TrimSpace(string(out))
		}
		dir := os.Getenv("GPUSLICE_DIST_DIR")
		if dir == "" {
			tmp, err := os.MkdirTemp("", "gpuslice-dist-")
			if err != nil {
				mainPkgsErr = err
				return
			}
			dir, ownDist = tmp, tmp
			if err := buildPackages(root, build, version, dir, nil, "deb", "rpm"); err != nil {
				mainPkgsErr = err
				return
			}
		}
		mainPkgs, mainPkgsErr = findPackages(dir, version)
	})
	if mainPkgsErr != nil {
		t.Fatalf("packages: %v", mainPkgsErr)
	}
	return mainPkgs
}

// buildPackages runs packaging/build-packages.sh, with env added to its
// environment.
func buildPackages(root, build, version, dir string, env []string, formats ...string) error {
	cmd := exec.Command(filepath.Join(root, "packaging", "build-packages.sh"),
		append([]string{version, dir}, formats...)...)
	cmd.Env = append(append(os.Environ(), "BUILD="+build), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("build-packages.sh %s: %v\n%s", version, err, out)
	}
	return nil
}

// findPackages locates the four packages of version in dir; missing formats
// stay "".
func findPackages(dir, version string) (pkgSet, error) {
	s := pkgSet{Version: version, dir: dir}
	want := map[*string]string{
		&s.Deb:     "gpuslice_" + version + "-1_" + debArch + ".deb",
		&s.FakeDeb: "gpuslice-fakecuda_" + version + "-1_" + debArch + ".deb",
		&s.RPM:     "gpuslice-" + version + "-1." + rpmArch + ".rpm",
		&s.FakeRPM: "gpuslice-fakecuda-" + version + "-1." + rpmArch + ".rpm",
	}
	for p, name := range want {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			*p = path
		}
	}
	if s.Deb == "" || s.FakeDeb == "" {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		return s, fmt.Errorf("no %s packages of version %s in %s (found %v): run make packages",
			"deb", version, dir, names)
	}
	return s, nil
}

// need fails the test when a tool is missing (make deps installs them).
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run make deps", tool)
		}
	}
}

// run runs a command and returns its combined output; it fails the test on
// a non-zero exit.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// lines splits output into non-empty trimmed lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// examples lists the example programs in build/examples (what the
// fakecuda package must ship).
func examples(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(testenv.BuildDir(t), "examples")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("examples: %v", err)
	}
	var out []string
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o100 == 0 {
			continue
		}
		out = append(out, e.Name())
	}
	if len(out) == 0 {
		t.Fatalf("no example programs in %s", dir)
	}
	return out
}

// Expected contents. Modes are checked for the files listed with one.
type entry struct {
	path string
	mode os.FileMode // 0: not checked
}

func gpusliceFiles(format string, releases []string) []entry {
	files := []entry{
		{"/usr/sbin/gpusliced", 0o755},
		{"/usr/bin/gpuslice", 0o755},
		{"/usr/libexec/gpuslice/gpuslice-prolog", 0o755},
		{"/usr/libexec/gpuslice/gpuslice-epilog", 0o755},
		{"/usr/libexec/gpuslice/gpuslice-ctxprobe", 0o755},
		{"/usr/lib/gpuslice/libgpuslice.so", 0o644},
		{"/etc/gpuslice/gpusliced.yaml", 0o644},
		{"/etc/gpuslice/plugstack.conf", 0o644},
		{"/usr/share/doc/gpuslice/slurm.conf.fragment", 0o644},
		{"/usr/share/gpuslice/job_submit.lua", 0o644},
		{"/usr/share/doc/gpuslice/third-party-licenses.txt", 0o644},
		{"/usr/share/man/man1/gpuslice.1.gz", 0o644},
		{"/usr/share/man/man8/gpusliced.8.gz", 0o644},
		{"/usr/share/gpuslice/monitoring/gpuslice-alerts.yml", 0o644},
		{"/usr/share/gpuslice/monitoring/gpuslice-dashboard.json", 0o644},
		{"/etc/enroot/hooks.d/50-gpuslice.sh", 0o755},
		{"/usr/share/gpuslice/apptainer/gpuslice.conf", 0o644},
		{"/usr/share/gpuslice/apptainer/ld.so.preload", 0o644},
		{"/usr/share/gpuslice/apptainer/taskprolog.sh", 0o755},
	}
	for _, page := range docPages() {
		files = append(files, entry{"/usr/share/doc/gpuslice/" + page, 0o644})
	}
	// The plugin of each Slurm release (the RPM owns their directories).
	for _, r := range releases {
		files = append(files, entry{"/usr/lib/gpuslice/spank/" + r + "/gpuslice.so", 0o644})
		if format == "rpm" {
			files = append(files, entry{"/usr/lib/gpuslice/spank/" + r, 0o755})
		}
	}
	if format == "deb" {
		return append(files,
			entry{"/usr/lib/systemd/system/gpusliced.service", 0o644},
			entry{"/usr/share/doc/gpuslice/copyright", 0o644},
			entry{"/usr/share/doc/gpuslice/changelog.Debian.gz", 0o644},
		)
	}
	return append(files,
		entry{"/usr/lib/gpuslice/spank", 0o755},
		entry{"/usr/lib/systemd/system/gpusliced.service", 0o644},
		entry{"/usr/share/licenses/gpuslice/LICENSE", 0o644},
		// Directories the RPM owns.
		entry{"/etc/gpuslice", 0o755},
		entry{"/usr/lib/gpuslice", 0o755},
		entry{"/usr/libexec/gpuslice", 0o755},
		entry{"/usr/share/doc/gpuslice", 0o755},
		entry{"/usr/share/licenses/gpuslice", 0o755},
		entry{"/usr/share/gpuslice", 0o755},
		entry{"/usr/share/gpuslice/monitoring", 0o755},
		entry{"/usr/share/gpuslice/apptainer", 0o755},
	)
}

// docPages are the pages of docs/ and the pictures they show (every one
// is shipped).
func docPages() []string {
	paths, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	svgs, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.svg"))
	paths = append(paths, svgs...)
	pages := make([]string, 0, len(paths))
	for _, p := range paths {
		pages = append(pages, filepath.Base(p))
	}
	if len(pages) == 0 {
		panic("docs/*.md not found from " + func() string { wd, _ := os.Getwd(); return wd }())
	}
	sort.Strings(pages)
	return pages
}

func fakecudaFiles(format string, progs []string) []entry {
	files := []entry{
		{"/usr/lib/gpuslice/fakecuda/libcuda.so.1", 0o644},
		{"/usr/lib/gpuslice/fakecuda/libcudart.so.12", 0o644},
		{"/usr/lib/gpuslice/fakecuda/libnvidia-ml.so.1", 0o644},
	}
	for _, p := range progs {
		files = append(files, entry{"/usr/libexec/gpuslice/examples/" + p, 0o755})
	}
	files = append(files, entry{"/usr/libexec/gpuslice/lib", 0}) // symlink to the libraries
	if format == "deb" {
		return append(files,
			entry{"/usr/share/doc/gpuslice-fakecuda/copyright", 0o644},
			entry{"/usr/share/doc/gpuslice-fakecuda/changelog.Debian.gz", 0o644},
		)
	}
	return append(files,
		entry{"/usr/share/licenses/gpuslice-fakecuda/LICENSE", 0o644},
		entry{"/usr/lib/gpuslice", 0o755},
		entry{"/usr/lib/gpuslice/fakecuda", 0o755},
		entry{"/usr/libexec/gpuslice", 0o755},
		entry{"/usr/libexec/gpuslice/examples", 0o755},
		entry{"/usr/share/licenses/gpuslice-fakecuda", 0o755},
	)
}

// debContents lists the regular files and symlinks of a .deb with their
// permission bits (directories are dpkg's business).
func debContents(t *testing.T, deb string) map[string]os.FileMode {
	t.Helper()
	out := run(t, nil, "dpkg-deb", "--contents", deb)
	got := map[string]os.FileMode{}
	for _, l := range lines(out) {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: unexpected line %q", l)
		}
		perm, path := f[0], strings.TrimPrefix(f[5], ".")
		if perm[0] == 'd' {
			continue
		}
		got[path] = parsePerm(t, perm)
	}
	return got
}

// rpmContents lists every path an .rpm owns (files and directories) with
// its permission bits.
func rpmContents(t *testing.T, rpm string) map[string]os.FileMode {
	t.Helper()
	out := run(t, nil, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILENAMES}\n]`, rpm)
	got := map[string]os.FileMode{}
	for _, l := range lines(out) {
		perm, path, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("rpm -qp: unexpected line %q", l)
		}
		got[path] = parsePerm(t, perm)
	}
	// rpm -qlp is what admins run; it must agree.
	list := lines(run(t, nil, "rpm", "-qlp", rpm))
	if len(list) != len(got) {
		t.Errorf("rpm -qlp lists %d paths, --qf %d", len(list), len(got))
	}
	return got
}

func parsePerm(t *testing.T, s string) os.FileMode {
	t.Helper()
	if len(s) != 10 {
		t.Fatalf("bad permission string %q", s)
	}
	var m os.FileMode
	for i, c := range s[1:] {
		if c != '-' {
			m |= 1 << (8 - i)
		}
	}
	return m
}

func TestPackageContents(t *testing.T) {
	need(t, "dpkg-deb", "rpm")
	p := packages(t)
	progs := examples(t)
	releases := buildReleases(t)
	cases := []struct {
		name, path, format string
		want               []entry
	}{
		{"gpuslice.deb", p.Deb, "deb", gpusliceFiles("deb", releases)},
		{"gpuslice-fakecuda.deb", p.FakeDeb, "deb", fakecudaFiles("deb", progs)},
		{"gpuslice.rpm", p.RPM, "rpm", gpusliceFiles("rpm", releases)},
		{"gpuslice-fakecuda.rpm", p.FakeRPM, "rpm", fakecudaFiles("rpm", progs)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.path == "" {
				t.Fatalf("%s was not built", c.name)
			}
			var got map[string]os.FileMode
			if c.format == "deb" {
				got = debContents(t, c.path)
			} else {
				got = rpmContents(t, c.path)
			}
			want := map[string]os.FileMode{}
			for _, e := range c.want {
				want[e.path] = e.mode
			}
			for path, mode := range want {
				gm, ok := got[path]
				switch {
				case !ok:
					t.Errorf("missing %s", path)
				case mode != 0 && gm != mode:
					t.Errorf("%s: mode %v, want %v", path, gm, mode)
				}
			}
			var extra []string
			for path := range got {
				if _, ok := want[path]; !ok {
					extra = append(extra, path)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 {
				t.Errorf("unexpected paths: %v", extra)
			}
		})
	}
}

// debField reads one control field of a .deb.
func debField(t *testing.T, deb, field string) string {
	t.Helper()
	return strings.TrimSpace(run(t, nil, "dpkg-deb", "--field", deb, field))
}

func rpmQuery(t *testing.T, rpm, format string) string {
	t.Helper()
	return strings.TrimSpace(run(t, nil, "rpm", "-qp", "--qf", format, rpm))
}

func TestPackageMetadata(t *testing.T) {
	need(t, "dpkg-deb", "rpm")
	p := packages(t)
	if !regexp.MustCompile(`^[0-9][0-9A-Za-z.+~]*$`).MatchString(p.Version) {
		t.Fatalf("version %q is not a valid package version", p.Version)
	}

	t.Run("deb", func(t *testing.T) {
		for _, c := range []struct{ deb, name string }{{p.Deb, "gpuslice"}, {p.FakeDeb, "gpuslice-fakecuda"}} {
			if got := debField(t, c.deb, "Package"); got != c.name {
				t.Errorf("%s: Package %q", c.deb, got)
			}
			if got, want := debField(t, c.deb, "Version"), p.Version+"-1"; got != want {
				t.Errorf("%s: Version %q, want %q", c.name, got, want)
			}
			if got := debField(t, c.deb, "Architecture"); got != debArch {
				t.Errorf("%s: Architecture %q", c.name, got)
			}
			if dep := debField(t, c.deb, "Depends"); !strings.HasPrefix(dep, "libc6 (>= 2.") {
				t.Errorf("%s: Depends %q, want libc6 (>= 2.x)", c.name, dep)
			}
		}
		// Nothing in gpuslice's relations may name the fakecuda package.
		for _, f := range []string{"Depends", "Pre-Depends", "Recommends", "Suggests", "Enhances"} {
			if v := debField(t, p.Deb, f); strings.Contains(v, "fakecuda") {
				t.Errorf("gpuslice %s: %q pulls in fakecuda", f, v)
			}
		}
		// Exactly the two configuration files are conffiles.
		dir := t.TempDir()
		run(t, nil, "dpkg-deb", "--control", p.Deb, dir)
		conff, err := os.ReadFile(filepath.Join(dir, "conffiles"))
		if err != nil {
			t.Fatalf("conffiles: %v", err)
		}
		got := lines(string(conff))
		sort.Strings(got)
		want := []string{"/etc/enroot/hooks.d/50-gpuslice.sh", "/etc/gpuslice/gpusliced.yaml", "/etc/gpuslice/plugstack.conf"}
		if !slices.Equal(got, want) {
			t.Errorf("conffiles %v, want %v", got, want)
		}
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
				t.Errorf("maintainer script %s: %v", s, err)
			}
		}
		// Debian's Slurm plugin directory triggers postinst (a Slurm
		// upgrade selects the plugin again); no Slurm release is a
		// dependency.
		trig, err := os.ReadFile(filepath.Join(dir, "triggers"))
		if want := "interest-noawait " + debPluginDir + "\n"; err != nil || string(trig) != want {
			t.Errorf("triggers %q (%v), want %q", trig, err, want)
		}
		if dep := debField(t, p.Deb, "Depends"); strings.Contains(dep, "slurm") {
			t.Errorf("Depends %q names Slurm: the package is for every release", dep)
		}
	})

	t.Run("rpm", func(t *testing.T) {
		for _, c := range []struct{ rpm, name string }{{p.RPM, "gpuslice"}, {p.FakeRPM, "gpuslice-fakecuda"}} {
			if c.rpm == "" {
				t.Fatalf("%s.rpm was not built", c.name)
			}
			got := rpmQuery(t, c.rpm, "%{NAME} %{VERSION} %{RELEASE} %{ARCH}")
			if want := c.name + " " + p.Version + " 1 " + rpmArch; got != want {
				t.Errorf("rpm header %q, want %q", got, want)
			}
			req := run(t, nil, "rpm", "-qp", "--requires", c.rpm)
			if !regexp.MustCompile(`(?m)^glibc >= 2\.[0-9]+$`).MatchString(req) {
				t.Errorf("%s requires:\n%s\nwant glibc >= 2.x", c.name, req)
			}
			if c.name == "gpuslice" && strings.Contains(req, "fakecuda") {
				t.Errorf("gpuslice.rpm requires fakecuda:\n%s", req)
			}
		}
		weak := run(t, nil, "rpm", "-qp", "--recommends", "--suggests", "--supplements", "--enhances", p.RPM)
		if strings.Contains(weak, "fakecuda") {
			t.Errorf("gpuslice.rpm weak dependencies name fakecuda:\n%s", weak)
		}
		// %config(noreplace) on exactly the two configuration files; docs
		// are %doc, the license %license.
		out := rpmQuery(t, p.RPM, `[%{FILEFLAGS:fflags}|%{FILENAMES}\n]`)
		flags := map[string]string{}
		for _, l := range lines(out) {
			f, path, _ := strings.Cut(l, "|")
			flags[path] = f
		}
		var conf []string
		for path, f := range flags {
			if strings.Contains(f, "c") {
				if !strings.Contains(f, "n") {
					t.Errorf("%s is %%config without noreplace (%s)", path, f)
				}
				conf = append(conf, path)
			}
		}
		sort.Strings(conf)
		want := []string{"/etc/enroot/hooks.d/50-gpuslice.sh", "/etc/gpuslice/gpusliced.yaml", "/etc/gpuslice/plugstack.conf"}
		if !slices.Equal(conf, want) {
			t.Errorf("config files %v, want %v", conf, want)
		}
		for _, doc := range append(docPages(), "slurm.conf.fragment", "third-party-licenses.txt") {
			if f := flags["/usr/share/doc/gpuslice/"+doc]; f != "d" {
				t.Errorf("%s: flags %q, want %%doc", doc, f)
			}
		}
		if f := flags["/usr/share/licenses/gpuslice/LICENSE"]; f != "l" {
			t.Errorf("LICENSE: flags %q, want %%license", f)
		}
		for _, tag := range []string{"POSTIN", "PREUN", "POSTUN", "POSTTRANS"} {
			if s := rpmQuery(t, p.RPM, "%{"+tag+"}"); s == "(none)" || s == "" {
				t.Errorf("gpuslice.rpm has no %s scriptlet", tag)
			}
		}
	})
}

func TestRPMDigests(t *testing.T) {
	need(t, "rpm")
	p := packages(t)
	for _, rpm := range []string{p.RPM, p.FakeRPM} {
		t.Run(filepath.Base(rpm), func(t *testing.T) {
			if rpm == "" {
				t.Fatal("rpm was not built")
			}
			out := run(t, nil, "rpm", "-K", rpm)
			if !strings.Contains(out, "digests OK") {
				t.Errorf("rpm -K: %s", out)
			}
		})
	}
}

func TestLintian(t *testing.T) {
	need(t, "lintian")
	p := packages(t)
	for _, deb := range []string{p.Deb, p.FakeDeb} {
		t.Run(filepath.Base(deb), func(t *testing.T) {
			cmd := exec.Command("lintian", "--no-tag-display-limit", deb)
			out, err := cmd.CombinedOutput()
			var errs []string
			for _, l := range lines(string(out)) {
				if strings.HasPrefix(l, "E:") {
					errs = append(errs, l)
				}
			}
			if len(errs) > 0 {
				t.Errorf("lintian errors:\n%s", strings.Join(errs, "\n"))
			}
			if err != nil && len(errs) == 0 {
				t.Errorf("lintian failed without reporting an error: %v\n%s", err, out)
			}
			if len(out) > 0 {
				t.Logf("lintian:\n%s", bytes.TrimSpace(out))
			}
		})
	}
}

// rpmRoot runs rpm on a scratch root (no scriptlets, no dependency checks:
// this is a Debian machine); rpm's complaint about not being Debian's
// package manager is dropped.
func rpmRoot(t *testing.T, root string, args ...string) string {
	t.Helper()
	out := run(t, nil, "rpm", append([]string{"--root", root, "--dbpath", "/var/lib/rpm"}, args...)...)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "rpm: RPM should not be used directly") || strings.HasPrefix(l, "rpm: However assuming") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// TestRPMInstallUpgradeErase installs, upgrades and erases the .rpm in a
// scratch root: the payload lands with its modes, and an edited
// configuration survives the upgrade and is saved as .rpmsave at erase.
func TestRPMInstallUpgradeErase(t *testing.T) {
	need(t, "rpm")
	if os.Getuid() != 0 {
		t.Skip("needs root (file ownership in the scratch root)")
	}
	oldPkgs, newPkgs := upgradePair(t)
	root := t.TempDir()
	rpmRoot(t, root, "--initdb")
	rpmRoot(t, root, "-i", "--nodeps", "--noscripts", oldPkgs.RPM, oldPkgs.FakeRPM)
	if got := rpmRoot(t, root, "-q", "gpuslice"); got != "gpuslice-0.1.0-1."+rpmArch {
		t.Fatalf("rpm -q gpuslice: %q", got)
	}
	if out := rpmRoot(t, root, "-V", "--nodeps", "gpuslice", "gpuslice-fakecuda"); out != "" {
		t.Errorf("rpm -V after install:\n%s", out)
	}
	for path, mode := range map[string]os.FileMode{
		"/usr/sbin/gpusliced": 0o755, "/usr/lib/gpuslice/spank/22.05/gpuslice.so": 0o644,
		"/usr/lib/systemd/system/gpusliced.service": 0o644, "/etc/gpuslice/gpusliced.yaml": 0o644,
		"/usr/libexec/gpuslice/examples/target_app": 0o755,
	} {
		st, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}

	conf := filepath.Join(root, "etc/gpuslice/gpusliced.yaml")
	edited := readFile(t, conf) + "\n# edited by the site\n"
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	rpmRoot(t, root, "-U", "--nodeps", "--noscripts", newPkgs.RPM, newPkgs.FakeRPM)
	if got := rpmRoot(t, root, "-q", "gpuslice"); got != "gpuslice-0.1.1-1."+rpmArch {
		t.Fatalf("after upgrade, rpm -q gpuslice: %q", got)
	}
	if got := readFile(t, conf); got != edited {
		t.Errorf("upgrade replaced the edited configuration")
	}
	if extra, _ := filepath.Glob(conf + ".rpm*"); len(extra) > 0 {
		t.Errorf("upgrade left %v (the packaged file did not change)", extra)
	}

	rpmRoot(t, root, "-e", "--nodeps", "--noscripts", "gpuslice")
	if _, err := os.Stat(filepath.Join(root, "usr/sbin/gpusliced")); err == nil {
		t.Errorf("gpusliced still installed after erase")
	}
	if got, err := os.ReadFile(conf + ".rpmsave"); err != nil || string(got) != edited {
		t.Errorf("erase did not keep the edited configuration as .rpmsave: %v", err)
	}
}
