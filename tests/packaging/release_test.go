package packaging

// The release tarball (make dist, packaging/dist.sh) builds the packages
// on a site's own host, offline: `rpmbuild -ta` with the spec it holds,
// and `make release-deb` in it, each with the SPANK plugin of the host's
// Slurm built from that Slurm's headers (docs/build-packages.md).

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// releaseVersion is the tarball's version: newer than the upgrade pair's.
const releaseVersion = "0.2.0"

// compareContents fails for each path missing from got or not in want,
// and each mode that differs (0 in want: not checked).
func compareContents(t *testing.T, what string, got map[string]os.FileMode, want []entry) {
	t.Helper()
	w := map[string]os.FileMode{}
	for _, e := range want {
		w[e.path] = e.mode
	}
	for path, mode := range w {
		gm, ok := got[path]
		switch {
		case !ok:
			t.Errorf("%s: missing %s", what, path)
		case mode != 0 && gm != mode:
			t.Errorf("%s: %s: mode %v, want %v", what, path, gm, mode)
		}
	}
	var extra []string
	for path := range got {
		if _, ok := w[path]; !ok {
			extra = append(extra, path)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("%s: unexpected paths: %v", what, extra)
	}
}

// withDocsOf replaces the documentation pages of want (docs/ of the
// checkout) by those of the source tree src: the tarball holds the
// committed pages.
func withDocsOf(t *testing.T, want []entry, src string) []entry {
	t.Helper()
	var out []entry
	for _, e := range want {
		dir, name := filepath.Split(e.path)
		if dir == "/usr/share/doc/gpuslice/" && (strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".svg")) {
			continue
		}
		out = append(out, e)
	}
	pages, _ := filepath.Glob(filepath.Join(src, "docs", "*.md"))
	svgs, _ := filepath.Glob(filepath.Join(src, "docs", "*.svg"))
	if len(pages) == 0 {
		t.Fatalf("no docs/*.md in %s", src)
	}
	for _, p := range append(pages, svgs...) {
		out = append(out, entry{"/usr/share/doc/gpuslice/" + filepath.Base(p), 0o644})
	}
	return out
}

// without returns list without the names given.
func without(list []string, names ...string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(names, s) {
			out = append(out, s)
		}
	}
	return out
}

// The tarball ships the plugin of every release the build has but two:
// SchedMD's newest, which rpmbuild -ta builds against that release's
// headers, and 22.05, which make release-deb builds against Debian 12's
// (libslurm-dev, this machine's), so each package can only carry them
// from the host's headers. The .rpm is then installed in an rpm root over
// make packages' 0.1.0 and with a stand-in Slurm as on an EL node, its
// scriptlets and triggers run by rpm: Slurm upgraded to the newest
// release enables the plugin rpmbuild built, which that release's srun
// loads. The .deb is built as on a host whose C library is older than
// the packages' glibc 2.34 (EL 8 has 2.28): against Debian 11's 2.31,
// whose ld.so then runs its programs.
func TestReleaseTarball(t *testing.T) {
	need(t, "rpmbuild", "rpm", "dpkg-deb", "git")
	repo := testenv.RepoRoot(t)
	build := testenv.BuildDir(t)
	all := buildReleases(t)
	newest := all[len(all)-1]
	headers := filepath.Join(build, "slurm", newest, "include")
	if newest == "24.11" || newest == "22.05" {
		t.Skipf("no SchedMD release built (make slurm-src): the newest plugin is %s", newest)
	}
	if _, err := os.Stat(filepath.Join(headers, "slurm", "spank.h")); err != nil {
		t.Skipf("Slurm %s's headers are not built (make slurm-src-%s): %v", newest, newest, err)
	}
	if _, err := os.Stat("/usr/include/slurm/spank.h"); err != nil {
		t.Fatalf("Debian's Slurm headers: %v (make deps installs libslurm-dev)", err)
	}
	shipped := without(all, newest, "22.05")

	// Under the build directory, at the same path every run: the Go build
	// cache serves the tarball's nfpm (built from tools/vendor without
	// -trimpath) from one run to the next.
	dir := filepath.Join(build, "tests", "release-tarball")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(filepath.Join(repo, "packaging", "dist.sh"), releaseVersion, dir)
	cmd.Env = append(os.Environ(), "BUILD="+build, "GPUSLICE_SLURM_RELEASES="+strings.Join(shipped, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, out)
	}
	tarball := filepath.Join(dir, "gpuslice-"+releaseVersion+".tar.gz")
	listing := lines(run(t, nil, "tar", "-tzf", tarball))
	top := "gpuslice-" + releaseVersion + "/"
	for _, f := range []string{"gpuslice.spec", "packaging/VERSION", "vendor/modules.txt", "tools/vendor/modules.txt",
		"Makefile", "go.mod"} {
		if !slices.Contains(listing, top+f) {
			t.Errorf("the tarball has no %s", f)
		}
	}
	for _, r := range all {
		has := slices.Contains(listing, top+"spank/prebuilt/"+r+"/gpuslice.so")
		if has != slices.Contains(shipped, r) {
			t.Errorf("the tarball ships the plugin for %s: %v, want %v", r, has, !has)
		}
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "tar", "-xzf", tarball, "-C", src)
	src = filepath.Join(src, "gpuslice-"+releaseVersion)
	progs := examples(t)

	// Offline: no module proxy, the vendored modules. Nothing of the make
	// that runs this suite (its VERSION, BUILD, flags) reaches the
	// tarball's: the version is its own.
	var offline []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "VERSION", "BUILD", "DIST", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
		default:
			offline = append(offline, kv)
		}
	}
	offline = append(offline, "GOPROXY=off", "GOFLAGS=-mod=vendor", "GOTOOLCHAIN=local")

	t.Run("rpmbuild -ta", func(t *testing.T) {
		top := filepath.Join(dir, "rpmbuild")
		cmd := exec.Command("rpmbuild", "-ta", "--nodeps", "--define", "_topdir "+top,
			"--define", "slurm_includedir "+headers, tarball)
		cmd.Env = offline
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rpmbuild -ta: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "SPANK plugin built against "+headers+"/slurm/spank.h") {
			t.Errorf("rpmbuild -ta did not build the plugin against %s:\n%s", headers, out)
		}
		rpmDir := filepath.Join(top, "RPMS", rpmArch)
		pkg := filepath.Join(rpmDir, "gpuslice-"+releaseVersion+"-1."+rpmArch+".rpm")
		fake := filepath.Join(rpmDir, "gpuslice-fakecuda-"+releaseVersion+"-1."+rpmArch+".rpm")
		carried := without(all, "22.05")
		compareContents(t, "gpuslice.rpm", rpmContents(t, pkg), withDocsOf(t, gpusliceFiles("rpm", carried), src))
		compareContents(t, "gpuslice-fakecuda.rpm", rpmContents(t, fake), fakecudaFiles("rpm", progs))
		triggers := run(t, nil, "rpm", "-qp", "--triggers", pkg)
		for _, s := range []string{"in", "postun"} {
			if !strings.Contains(triggers, "trigger"+s+" scriptlet (using /bin/sh) -- slurm, slurm-ohpc") {
				t.Errorf("no %%trigger%s on slurm, slurm-ohpc:\n%s", s, triggers)
			}
		}
		if os.Getuid() != 0 {
			t.Skip("needs root (rpm runs the scriptlets chrooted)")
		}
		// The payload: each plugin built for the release its directory
		// names (the newest one from the headers), the programs the
		// tarball's version.
		payload := t.TempDir()
		rpmRoot(t, payload, "--initdb")
		rpmRoot(t, payload, "-i", "--nodeps", "--noscripts", pkg)
		if got := packagedReleases(t, payload); !slices.Equal(got, carried) {
			t.Errorf("plugins for %v, want %v", got, carried)
		}
		if v := run(t, nil, filepath.Join(payload, "usr/bin/gpuslice"), "--version"); !strings.Contains(v, "gpuslice "+releaseVersion+" ") {
			t.Errorf("gpuslice --version: %q, want %s", v, releaseVersion)
		}

		older, newer := newestSchedMDPair(t, all)
		oldPkgs, _ := upgradePair(t)
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
		step("gpuslice 0.1.0 (make packages)", "-i", "--nodeps", oldPkgs.RPM)
		got := step("Slurm "+older.name, "-i", "--nodeps", slurmOld)
		checkLines(t, "Slurm "+older.name+" installed", got, "SPANK plugin for "+older.name+" enabled")

		got = step("gpuslice "+releaseVersion+" (rpmbuild -ta)", "-U", "--nodeps", pkg)
		if len(got) != 0 {
			t.Errorf("upgrading gpuslice, %s's plugin in both: printed %q", older.name, got)
		}
		if got := rpmRoot(t, root, "-q", "gpuslice"); got != "gpuslice-"+releaseVersion+"-1."+rpmArch {
			t.Fatalf("after the upgrade, rpm -q gpuslice: %q", got)
		}
		checkLoads(t, older, root, pd)

		got = step("Slurm "+newer.name, "-U", "--nodeps", slurmNew)
		checkLines(t, "Slurm upgraded to "+newer.name, got,
			"Slurm "+newer.name+" ("+pd+"): SPANK plugin for "+newer.name+" enabled", "(was the one for "+older.name+")")
		checkLoads(t, newer, root, pd)

		got = step("Slurm removed", "-e", "--nodeps", "slurm")
		checkLines(t, "Slurm removed", got, "no Slurm found", "SPANK plugin disabled")
		noLinks(t, root, pd)
		if got := step("gpuslice removed", "-e", "--nodeps", "gpuslice"); len(got) != 0 {
			t.Errorf("rpm -e gpuslice printed %q", got)
		}
	})

	// A host with an older C library than this machine's: Debian 11's
	// glibc 2.31 (make old-glibc) as the compiler's sysroot, and Debian
	// 12's Slurm headers alone (libslurm-dev, 22.05).
	t.Run("make release-deb on glibc 2.31", func(t *testing.T) {
		old := filepath.Join(build, "glibc-2.31", "root")
		lib := filepath.Join(old, "lib", "x86_64-linux-gnu")
		if _, err := os.Stat(filepath.Join(lib, "ld-2.31.so")); err != nil {
			t.Fatalf("glibc 2.31: %v (make old-glibc)", err)
		}
		inc := filepath.Join(dir, "include")
		if err := os.MkdirAll(inc, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/usr/include/slurm", filepath.Join(inc, "slurm")); err != nil {
			t.Fatal(err)
		}
		cc := "gcc " + strings.Join(oldGlibcFlags(t, old, filepath.Join(dir, "oldlibs")), " ")
		out := filepath.Join(dir, "debs")
		cmd := exec.Command("make", "-C", src, "-j2", "release-deb", "BUILD="+filepath.Join(src, "build"), "DIST="+out,
			"CC="+cc, "SLURM_INCLUDEDIR="+inc)
		cmd.Env = append(offline, "CC="+cc)
		log, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make release-deb: %v\n%s", err, log)
		}
		if !strings.Contains(string(log), "SPANK plugin built against "+inc+"/slurm/spank.h") {
			t.Errorf("make release-deb did not build the plugin against %s:\n%s", inc, log)
		}
		deb := filepath.Join(out, "gpuslice_"+releaseVersion+"-1_"+debArch+".deb")
		fake := filepath.Join(out, "gpuslice-fakecuda_"+releaseVersion+"-1_"+debArch+".deb")
		carried := without(all, newest)
		compareContents(t, "gpuslice.deb", debContents(t, deb), withDocsOf(t, gpusliceFiles("deb", carried), src))
		compareContents(t, "gpuslice-fakecuda.deb", debContents(t, fake), fakecudaFiles("deb", progs))
		root := t.TempDir()
		run(t, nil, "dpkg-deb", "-x", deb, root)
		run(t, nil, "dpkg-deb", "-x", fake, root)
		if got := packagedReleases(t, root); !slices.Equal(got, carried) {
			t.Errorf("plugins for %v, want %v", got, carried)
		}

		// Everything built here needs glibc 2.31 at most (the shipped
		// plugins are this machine's), the packages say so, and the
		// programs run on it.
		for _, p := range []string{deb, fake} {
			dep := debField(t, p, "Depends")
			v, ok := strings.CutPrefix(dep, "libc6 (>= ")
			if !ok || testenv.GlibcVersion("GLIBC_"+strings.TrimSuffix(v, ")")) > 2031 {
				t.Errorf("%s: Depends %q, want libc6 (>= 2.31 or older)", filepath.Base(p), dep)
			}
		}
		elfs := []string{"usr/sbin/gpusliced", "usr/bin/gpuslice", "usr/libexec/gpuslice/gpuslice-prolog",
			"usr/libexec/gpuslice/gpuslice-epilog", "usr/libexec/gpuslice/gpuslice-ctxprobe",
			"usr/lib/gpuslice/libgpuslice.so", "usr/lib/gpuslice/spank/22.05/gpuslice.so",
			"usr/lib/gpuslice/fakecuda/libcuda.so.1", "usr/lib/gpuslice/fakecuda/libcudart.so.12",
			"usr/lib/gpuslice/fakecuda/libnvidia-ml.so.1"}
		for _, p := range progs {
			elfs = append(elfs, "usr/libexec/gpuslice/examples/"+p)
		}
		for _, f := range elfs {
			if v := glibcNeeded(t, filepath.Join(root, f)); v > 2031 {
				t.Errorf("/%s needs glibc 2.%d", f, v-2000)
			}
		}
		for _, p := range []string{"usr/bin/gpuslice", "usr/sbin/gpusliced"} {
			out := run(t, nil, filepath.Join(lib, "ld-2.31.so"), "--library-path", lib, filepath.Join(root, p), "--version")
			if !strings.Contains(out, " "+releaseVersion+" ") {
				t.Errorf("/%s --version on glibc 2.31: %q", p, out)
			}
		}
		// What make packages built on this machine does not run there.
		if out, err := exec.Command(filepath.Join(lib, "ld-2.31.so"), "--library-path", lib,
			filepath.Join(build, "bin", "gpuslice"), "--version").CombinedOutput(); err == nil ||
			!strings.Contains(string(out), "GLIBC_2.3") {
			t.Logf("this machine's gpuslice on glibc 2.31: %v\n%s", err, out)
		}
	})
}

// oldGlibcFlags are the compiler flags that build against the glibc unpacked
// under root (make old-glibc): its headers and libraries as the sysroot.
// Its development links (libdl.so, ...) name absolute paths, which would
// lead out of it: links into it replace them, in dir.
func oldGlibcFlags(t *testing.T, root, dir string) []string {
	t.Helper()
	usr := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")
	lib := filepath.Join(root, "lib", "x86_64-linux-gnu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	links, _ := filepath.Glob(filepath.Join(usr, "*.so"))
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil || !filepath.IsAbs(target) {
			continue
		}
		if err := os.Symlink(filepath.Join(root, target), filepath.Join(dir, filepath.Base(l))); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--sysroot=" + root, "-B" + usr + "/", "-L" + dir, "-L" + usr, "-L" + lib,
		"-isystem", filepath.Join(root, "usr", "include"), "-Wl,-rpath-link," + lib}
}

// glibcNeeded is the newest glibc symbol version an ELF file imports.
func glibcNeeded(t *testing.T, path string) int {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	newest := 0
	for _, s := range syms {
		newest = max(newest, testenv.GlibcVersion(s.Version))
	}
	if newest == 0 {
		t.Fatalf("%s imports no glibc symbol version", path)
	}
	return newest
}
