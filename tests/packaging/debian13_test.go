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

// docs/install.md's path for Debian and Ubuntu, as written, in the Debian
// 13 root (installpath_test.go; the node: testdata/install-node.sh): the
// package installed with apt, which enables the plugin for Slurm 24.11;
// the GPUs declared, the slurm.conf lines, job_submit.lua, the daemons
// restarted; every line of Verify; then a job of "Without a GPU" held to
// its quota as another user, a bad --gpu-mem refused at submit, and
// Remove's purge. The root is seen through an overlay: it stays as built.
// The GPU is fakecuda's.
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
	repo := testenv.RepoRoot(t)
	page, err := os.ReadFile(filepath.Join(repo, installPage))
	if err != nil {
		t.Fatal(err)
	}
	script, err := debianPathScript(string(page), p.Version)
	if err != nil {
		t.Fatal(err)
	}
	scripts := t.TempDir()
	if err := os.WriteFile(filepath.Join(scripts, "path.sh"), []byte(script), 0o755); err != nil {
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
	dist := filepath.Dir(p.Deb)
	binds := dist + ":/mnt/gpuslice-dist:ro " + filepath.Join(repo, "tests", "packaging", "testdata") + ":/mnt/gpuslice-test:ro " +
		scripts + ":/mnt/gpuslice-path:ro"
	smi := ""
	if d := whereDebianNVIDIA(build); d != "" {
		binds += " " + d + ":/usr/lib/nvidia/current:ro"
		smi = "/usr/lib/nvidia/current"
	} else {
		t.Fatalf("no nvidia-smi from Debian's package in %s (make nvidia-debs): Verify runs it", build)
	}
	cmd := exec.Command(filepath.Join(repo, "scripts", "trixie-root.sh"), "run", debroot.Root(build),
		"/bin/bash", "/mnt/gpuslice-path/path.sh")
	cmd.Env = append(testenv.BaseEnv(),
		"TRIXIE_OVERLAY="+ov,
		"TRIXIE_BINDS="+binds,
		"TRIXIE_ENV="+strings.Join([]string{
			"FAKEDEB=/mnt/gpuslice-dist/" + filepath.Base(p.FakeDeb),
			"NODE=" + node, "CTLD_PORT=" + ports[0], "SLURMD_PORT=" + ports[1],
			"NVIDIA_SMI_DIR=" + smi,
		}, " "))
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	t.Logf("install.md's Debian path in the Debian 13 root:\n%s", out)
	if err != nil {
		t.Fatalf("the path failed: %v", err)
	}
	checkDebianPath(t, string(out), p.Version)
}
