package packaging

// One .deb for Debian and Ubuntu carries the plugin built for every
// supported Slurm release and depends on none; installed in the Debian 13
// root the build makes (make trixie-root), following docs/install.md, it
// enables the plugin for that root's Slurm 24.11.

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/debroot"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// soPluginVersion reads plugin_version (the SLURM_VERSION_NUMBER Slurm
// checks at load) from a SPANK plugin.
func soPluginVersion(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("plugin %s: %v", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("plugin %s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		sec := f.Sections[s.Section]
		b, err := sec.Data()
		if err != nil || s.Value < sec.Addr || s.Value-sec.Addr+4 > uint64(len(b)) {
			t.Fatalf("plugin_version in %s: unreadable (%v)", path, err)
		}
		return binary.LittleEndian.Uint32(b[s.Value-sec.Addr:])
	}
	t.Fatalf("plugin %s exports no plugin_version", path)
	return 0
}

// Both packages carry the plugin of every release the build has, each
// built for the release its directory names, and depend on no Slurm.
func TestSlurmReleases(t *testing.T) {
	need(t, "dpkg-deb", "rpm")
	p := packages(t)
	want := buildReleases(t)
	for _, c := range []struct{ name, pkg string }{{"deb", p.Deb}, {"rpm", p.RPM}} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.name == "deb" {
				run(t, nil, "dpkg-deb", "-x", c.pkg, root)
			} else {
				rpmRoot(t, root, "--initdb")
				rpmRoot(t, root, "-i", "--nodeps", "--noscripts", c.pkg)
			}
			if got := packagedReleases(t, root); !slices.Equal(got, want) {
				t.Errorf("plugins for %v, want %v", got, want)
			}
			var deps string
			if c.name == "deb" {
				deps = debField(t, c.pkg, "Depends")
			} else {
				deps = run(t, nil, "rpm", "-qp", "--requires", c.pkg)
			}
			if strings.Contains(deps, "slurm") {
				t.Errorf("depends on Slurm: %s", deps)
			}
		})
	}
}

// The admin's steps of docs/install.md in the Debian 13 root: dpkg
// --install, the slurm.conf lines, daemons started as their units would,
// srun --help lists --gpu-mem, a job is held to its quota and a bad
// --gpu-mem refused at submit, then dpkg --purge. The root is seen through an
// overlay: it stays as built. The GPU is fakecuda's.
func TestDebian13Install(t *testing.T) {
	p := packages(t)
	build := testenv.BuildDir(t)
	if err := debroot.Ready(build); err != nil {
		if errors.Is(err, debroot.ErrSkip) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if !slices.Contains(buildReleases(t), "24.11") {
		t.Fatal("the packages carry no plugin for Slurm 24.11 (make spank-24.11)")
	}
	ov, err := os.MkdirTemp(filepath.Join(build, "trixie"), "pkgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ov) })
	var ports []string
	for len(ports) < 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
		l.Close()
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	node, _, _ := strings.Cut(host, ".")
	dist := filepath.Dir(p.Deb)
	repo := testenv.RepoRoot(t)
	cmd := exec.Command(filepath.Join(repo, "scripts", "trixie-root.sh"), "run", debroot.Root(build),
		"/mnt/gpuslice-test/debian13-install.sh")
	cmd.Env = append(testenv.BaseEnv(),
		"TRIXIE_OVERLAY="+ov,
		"TRIXIE_BINDS="+dist+":/mnt/gpuslice-dist:ro "+filepath.Join(repo, "tests", "packaging", "testdata")+":/mnt/gpuslice-test:ro",
		"TRIXIE_ENV="+strings.Join([]string{
			"DEB=/mnt/gpuslice-dist/" + filepath.Base(p.Deb),
			"FAKEDEB=/mnt/gpuslice-dist/" + filepath.Base(p.FakeDeb),
			"NODE=" + node, "CTLD_PORT=" + ports[0], "SLURMD_PORT=" + ports[1],
		}, " "))
	out, err := cmd.CombinedOutput()
	t.Logf("in the Debian 13 root:\n%s", out)
	if err != nil {
		t.Fatalf("install steps failed: %v", err)
	}
	got := map[string]string{}
	var allowed, denied int
	var total string
	for _, l := range lines(string(out)) {
		low := strings.ToLower(l)
		if strings.Contains(low, "warning") || strings.HasPrefix(low, "dpkg: error") {
			t.Errorf("in the root: %s", l)
		}
		ev := map[string]string{}
		for _, f := range strings.Fields(l) {
			if k, v, ok := strings.Cut(f, "="); ok {
				ev[k] = v
			}
		}
		switch {
		case ev["event"] == "meminfo" && ev["when"] == "before":
			total = ev["total"]
		case ev["event"] == "alloc" && ev["status"] == "allowed":
			allowed++
		case ev["event"] == "alloc" && ev["status"] == "denied":
			denied++
		case ev["event"] == "":
			if k, v, ok := strings.Cut(l, "="); ok {
				got[k] = v
			}
		}
	}
	if want := p.Version + "-1"; got["installed"] != want {
		t.Errorf("installed version %q, want %q", got["installed"], want)
	}
	if want := "../../gpuslice/spank/24.11/gpuslice.so"; got["plugin"] != want {
		t.Errorf("the plugin link in Debian 13's PluginDir points to %q, want %q (the plugin for 24.11)", got["plugin"], want)
	}
	if want := "gpuslice: Slurm 24.11 (" + debPluginDir + "): SPANK plugin for 24.11 enabled"; !strings.Contains(string(out), want) {
		t.Errorf("dpkg --install did not say %q", want)
	}
	if got["srun_help"] != "gpu-mem" {
		t.Errorf("Debian 13's srun --help did not list --gpu-mem")
	}
	if total != strconv.Itoa(64<<20) || allowed != 4 || denied != 1 {
		t.Errorf("srun --gpu-mem=64M target_app: total %q allowed %d denied %d, want 64 MiB, 4 and 1", total, allowed, denied)
	}
	if got["bad_gpu_mem"] != "invalid --gpu-mem '8X'" {
		t.Errorf("srun --gpu-mem=8X: %q, want the plugin's refusal", got["bad_gpu_mem"])
	}
	if got["purged"] != "yes" {
		t.Errorf("dpkg --purge did not complete")
	}
}
