package packaging

// The Slurm releases the package's plugin selection is checked against,
// each with its own srun, as built here: Debian 12's 22.05 (this machine's),
// Debian 13's 24.11 (the root of make trixie-root) and SchedMD's releases
// (make slurm-src, build/slurm/RELEASE).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/debroot"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// slurmRel is one release and what running its srun needs.
type slurmRel struct {
	name string // "25.05"
	// plugins: Slurm's own plugins as its srun sees them (inside the
	// Debian 13 root for 24.11); hostPlugins: the same from this machine.
	plugins, hostPlugins string
	// libc: the C library of the system it runs on, from this machine.
	libc string
	// srun: its srun (a path inside the root for 24.11).
	srun string
	root string // the Debian 13 root, for 24.11
}

// buildReleases are the releases the build holds a plugin for (what
// build-packages.sh puts in the packages by default), sorted.
func buildReleases(t *testing.T) []string {
	t.Helper()
	build := testenv.BuildDir(t)
	dirs := []string{"spank", "spank-24.11"}
	more, _ := filepath.Glob(filepath.Join(build, "spank", "[0-9]*.[0-9]*"))
	for _, m := range more {
		dirs = append(dirs, filepath.Join("spank", filepath.Base(m)))
	}
	var out []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(build, d, "slurm-version"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(build, d, "gpuslice.so")); err != nil {
			continue
		}
		var v uint32
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "0x%x", &v); err != nil {
			t.Fatalf("%s/slurm-version: %q", d, b)
		}
		if r := fmt.Sprintf("%d.%02d", v>>16&0xff, v>>8&0xff); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// slurmReleases returns the releases among want whose srun is here, in
// order, logging one line for each that is not. Under CI=true a SchedMD
// release whose source was found (no build/slurm/RELEASE/UNAVAILABLE) must
// be built.
func slurmReleases(t *testing.T, want []string) []slurmRel {
	t.Helper()
	build := testenv.BuildDir(t)
	var out []slurmRel
	for _, name := range want {
		var r slurmRel
		var missing string
		switch name {
		case "22.05":
			r = slurmRel{name: name, plugins: debPluginDir, hostPlugins: debPluginDir,
				libc: "/lib/x86_64-linux-gnu/libc.so.6", srun: "/usr/bin/srun"}
			if _, err := os.Stat(r.srun); err != nil {
				missing = "srun (make deps installs Debian's Slurm)"
			}
		case "24.11":
			root := debroot.Root(build)
			r = slurmRel{name: name, plugins: debPluginDir, hostPlugins: filepath.Join(root, debPluginDir),
				libc: filepath.Join(root, "usr/lib/x86_64-linux-gnu/libc.so.6"), srun: "/usr/bin/srun", root: root}
			if err := debroot.Ready(build); err != nil {
				missing = "the Debian 13 root: " + err.Error()
			}
		default:
			tree := filepath.Join(build, "slurm", name)
			r = slurmRel{name: name, plugins: filepath.Join(tree, "lib", "slurm"), hostPlugins: filepath.Join(tree, "lib", "slurm"),
				libc: "/lib/x86_64-linux-gnu/libc.so.6", srun: filepath.Join(tree, "bin", "srun")}
			if _, err := os.Stat(r.srun); err != nil {
				missing = "build/slurm/" + name + " (make slurm-src-" + name + ")"
				if _, err := os.Stat(filepath.Join(tree, "UNAVAILABLE")); err != nil && os.Getenv("CI") == "true" {
					t.Fatalf("Slurm %s: %s is not built", name, missing)
				}
			}
		}
		if missing != "" {
			t.Logf("Slurm %s left out: %s", name, missing)
			continue
		}
		out = append(out, r)
	}
	return out
}

// slurmPluginSample are three of Slurm's own plugins, in every release: a
// simulated Slurm installation holds them, enough for gpuslice slurm-plugin
// to read its release.
var slurmPluginSample = []string{"mcs_user.so", "mcs_account.so", "preempt_qos.so"}

// installSlurm puts r's sample plugins in dir (a PluginDir under a root)
// in place of what is there, as a Slurm package upgrade would, and the C
// library of r's system in the root.
func installSlurm(t *testing.T, root, dir string, r slurmRel) {
	t.Helper()
	full := filepath.Join(root, dir)
	old, _ := filepath.Glob(filepath.Join(full, "*.so"))
	for _, f := range old {
		if filepath.Base(f) != "gpuslice.so" {
			os.Remove(f)
		}
	}
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range slurmPluginSample {
		copyFile(t, filepath.Join(r.hostPlugins, p), filepath.Join(full, p))
	}
	copyFile(t, r.libc, filepath.Join(root, "lib/x86_64-linux-gnu/libc.so.6"))
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// srunHelp runs r's own srun --help (its real plugin loader; no daemon is
// needed) with a slurm.conf whose PluginDir is rootPluginDir (the plugin's
// link, where gpuslice slurm-plugin made it) then r's own plugins, and whose
// plugstack.conf includes the root's plugstack.conf.d, as the root's Slurm
// would read it.
func srunHelp(t *testing.T, r slurmRel, root, rootPluginDir string) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs-srun-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slurm.conf")
	stack := filepath.Join(dir, "plugstack.conf")
	body := fmt.Sprintf("ClusterName=gspkg\nSlurmctldHost=localhost\nPluginDir=%s:%s\nPlugStackConfig=%s\n"+
		"NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES\n",
		filepath.Join(root, rootPluginDir), r.plugins, stack)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	inc := "include " + filepath.Join(root, "etc/slurm/plugstack.conf.d/*.conf") + "\n"
	if err := os.WriteFile(stack, []byte(inc), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if r.root != "" {
		// The root is seen through an overlay: the binds' mount points
		// are made there, and the root stays as built.
		ov, err := os.MkdirTemp(filepath.Dir(r.root), "pkgtest-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(ov)
		cmd = exec.Command(filepath.Join(testenv.RepoRoot(t), "scripts", "trixie-root.sh"), "run", r.root, r.srun, "--help")
		cmd.Env = append(testenv.BaseEnv(), "TRIXIE_OVERLAY="+ov,
			"TRIXIE_BINDS="+dir+":"+dir+":ro "+root+":"+root+":ro", "TRIXIE_ENV=SLURM_CONF="+conf)
	} else {
		cmd = exec.Command(r.srun, "--help")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF=" + conf}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkLoads: r's srun --help loads the plugin the root enables and shows
// --gpu-mem.
func checkLoads(t *testing.T, r slurmRel, root, pluginDir string) {
	t.Helper()
	out, err := srunHelp(t, r, root, pluginDir)
	if err != nil || !strings.Contains(out, "--gpu-mem=SIZE") {
		t.Fatalf("Slurm %s: srun --help with the enabled plugin: %v, --gpu-mem shown: %v\n%s",
			r.name, err, strings.Contains(out, "--gpu-mem"), out)
	}
}

// checkWorksWithout: r's srun --help exits 0 and loads no gpuslice plugin.
func checkWorksWithout(t *testing.T, r slurmRel, root, pluginDir string) {
	t.Helper()
	out, err := srunHelp(t, r, root, pluginDir)
	if err != nil || strings.Contains(out, "--gpu-mem") {
		t.Fatalf("Slurm %s: srun --help with the plugin disabled: %v, --gpu-mem shown: %v\n%s",
			r.name, err, strings.Contains(out, "--gpu-mem"), out)
	}
}

// newestSchedMDPair is the two newest of SchedMD's releases among all (the
// build's, oldest first; Debian's 22.05 and 24.11 left out), built here,
// for a stand-in Slurm upgrade from the older to the newer; the test
// skips when fewer are built or the newest is not.
func newestSchedMDPair(t *testing.T, all []string) (older, newer slurmRel) {
	t.Helper()
	newest := all[len(all)-1]
	var schedmd []string
	for _, r := range all {
		if r != "22.05" && r != "24.11" {
			schedmd = append(schedmd, r)
		}
	}
	rels := slurmReleases(t, schedmd)
	if len(rels) < 2 || rels[len(rels)-1].name != newest {
		t.Skipf("needs two SchedMD releases built, the newest (%s) among them; have %d", newest, len(rels))
	}
	return rels[len(rels)-2], rels[len(rels)-1]
}
