package packaging

// The Debian 12 and Debian 13 packages each carry the plugin built for their
// Slurm (22.05 and 24.11) and depend on that release; the Debian 13 package
// installs and works in the Debian 13 root the build makes (make
// trixie-root), following docs/install.md.

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/debroot"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// deb13 returns Debian 13's package, or skips when the Debian 13 root could
// not be built here.
func deb13(t *testing.T) (pkgSet, string) {
	t.Helper()
	p := packages(t)
	if p.Deb13 != "" {
		return p, p.Deb13
	}
	if err := debroot.Ready(testenv.BuildDir(t)); errors.Is(err, debroot.ErrSkip) {
		t.Skip(err)
	}
	t.Fatalf("no Debian 13 package in %s (make packages builds it with the plugin of make spank-24.11)", p.dir)
	return p, ""
}

// pluginVersion reads plugin_version (the SLURM_VERSION_NUMBER Slurm checks
// at load) from the SPANK plugin inside a .deb.
func pluginVersion(t *testing.T, deb string) uint32 {
	t.Helper()
	dir := t.TempDir()
	run(t, nil, "dpkg-deb", "-x", deb, dir)
	f, err := elf.Open(filepath.Join(dir, debPluginDir, "gpuslice.so"))
	if err != nil {
		t.Fatalf("plugin in %s: %v", deb, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("plugin in %s: %v", deb, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		sec := f.Sections[s.Section]
		b, err := sec.Data()
		if err != nil || s.Value < sec.Addr || s.Value-sec.Addr+4 > uint64(len(b)) {
			t.Fatalf("plugin_version in %s: unreadable (%v)", deb, err)
		}
		return binary.LittleEndian.Uint32(b[s.Value-sec.Addr:])
	}
	t.Fatalf("plugin in %s exports no plugin_version", deb)
	return 0
}

func TestSlurmRelease(t *testing.T) {
	need(t, "dpkg-deb")
	p, d13 := deb13(t)
	for _, c := range []struct {
		name, deb, version, release string
	}{
		{"Debian 12", p.Deb, p.Version + "-1", "22.05"},
		{"Debian 13", d13, p.Version + "-1+deb13", "24.11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := debField(t, c.deb, "Version"); got != c.version {
				t.Errorf("Version %q, want %q", got, c.version)
			}
			v := pluginVersion(t, c.deb)
			got := fmt.Sprintf("%d.%02d", v>>16&0xff, v>>8&0xff)
			if got != c.release {
				t.Errorf("plugin built for Slurm %s (plugin_version %#x), want %s", got, v, c.release)
			}
			major, _ := strconv.Atoi(c.release[:2])
			minor, _ := strconv.Atoi(c.release[3:])
			next := fmt.Sprintf("%d.%02d", major, minor+1)
			dep := debField(t, c.deb, "Depends")
			for _, want := range []string{
				"slurm-wlm-basic-plugins (>= " + c.release + ")",
				"slurm-wlm-basic-plugins (<< " + next + ")",
			} {
				if !strings.Contains(dep, want) {
					t.Errorf("Depends %q lacks %q", dep, want)
				}
			}
		})
	}
	if p.Deb13 != "" {
		t.Run("lintian", func(t *testing.T) {
			need(t, "lintian")
			out, _ := exec.Command("lintian", "--no-tag-display-limit", p.Deb13).CombinedOutput()
			for _, l := range lines(string(out)) {
				if strings.HasPrefix(l, "E:") {
					t.Errorf("lintian: %s", l)
				}
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
	_, d13 := deb13(t)
	p := packages(t)
	build := testenv.BuildDir(t)
	if err := debroot.Ready(build); err != nil {
		if errors.Is(err, debroot.ErrSkip) {
			t.Skip(err)
		}
		t.Fatal(err)
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
	dist := filepath.Dir(d13)
	repo := testenv.RepoRoot(t)
	cmd := exec.Command(filepath.Join(repo, "scripts", "trixie-root.sh"), "run", debroot.Root(build),
		"/mnt/gpuslice-test/debian13-install.sh")
	cmd.Env = append(testenv.BaseEnv(),
		"TRIXIE_OVERLAY="+ov,
		"TRIXIE_BINDS="+dist+":/mnt/gpuslice-dist:ro "+filepath.Join(repo, "tests", "packaging", "testdata")+":/mnt/gpuslice-test:ro",
		"TRIXIE_ENV="+strings.Join([]string{
			"DEB=/mnt/gpuslice-dist/" + filepath.Base(d13),
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
	if want := p.Version + "-1+deb13"; got["installed"] != want {
		t.Errorf("installed version %q, want %q", got["installed"], want)
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
