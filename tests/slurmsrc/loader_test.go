package slurmsrc

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// release is one Slurm release the plugin is built for, and where its own
// srun and headers are.
type release struct {
	name string // "25.05"
	// how: "debian12" (this machine's packages), "debian13" (the Debian 13
	// root of make trixie-root) or "source" (make slurm-src).
	how string
	// plugin: the plugin built for it, under the build directory.
	plugin string
	// build: the make target that builds the plugin.
	build string
}

// releases are every release the plugin is built for: Debian's 22.05 and
// 24.11 and each SchedMD release of mk/sources.txt.
func releases(t *testing.T) []release {
	rs := []release{
		{name: "22.05", how: "debian12", plugin: "spank/gpuslice.so", build: "spank"},
		{name: "24.11", how: "debian13", plugin: "spank-24.11/gpuslice.so", build: "spank-24.11"},
	}
	for _, s := range projectSources(t) {
		if m := slurmName.FindStringSubmatch(s.Name); m != nil {
			rs = append(rs, release{name: m[1], how: "source", plugin: "spank/" + m[1] + "/gpuslice.so", build: "spank-" + m[1]})
		}
	}
	return rs
}

// cluster is what running one release's srun needs.
type cluster struct {
	rel       release
	build     string // the build directory
	tree      string // build/slurm/RELEASE for "source"
	root      string // the Debian 13 root for "debian13"
	plugin    string // the plugin's path
	include   string // the release's headers (the directory holding slurm/)
	pluginDir string // Slurm's own plugins
}

// need returns rel's srun and plugin, or skips with one line saying what
// is not built. Under CI=true a release whose sources are here is never
// skipped: its build is missing, and that fails.
func need(t *testing.T, rel release) cluster {
	t.Helper()
	build := testenv.BuildDir(t)
	c := cluster{rel: rel, build: build, plugin: filepath.Join(build, rel.plugin)}
	var missing, why string
	switch rel.how {
	case "debian12":
		c.include, c.pluginDir = "/usr/include", "/usr/lib/x86_64-linux-gnu/slurm-wlm"
		if _, err := exec.LookPath("srun"); err != nil {
			missing = "srun (make deps installs Debian's Slurm)"
		}
	case "debian13":
		c.root = filepath.Join(build, "trixie", "root")
		c.include, c.pluginDir = filepath.Join(c.root, "usr", "include"), "/usr/lib/x86_64-linux-gnu/slurm-wlm"
		if b, err := os.ReadFile(filepath.Join(build, "trixie", "UNREACHABLE")); err == nil {
			why = strings.TrimSpace(string(b))
		}
		if _, err := os.Stat(filepath.Join(c.root, "usr", "bin", "srun")); err != nil {
			missing = "the Debian 13 root (make trixie-root)"
		} else if os.Geteuid() != 0 {
			t.Skip("Slurm 24.11 runs in the Debian 13 root, which needs root (chroot)")
		}
	case "source":
		c.tree = filepath.Join(build, "slurm", rel.name)
		c.include, c.pluginDir = filepath.Join(c.tree, "include"), filepath.Join(c.tree, "lib", "slurm")
		if b, err := os.ReadFile(filepath.Join(c.tree, "UNAVAILABLE")); err == nil {
			why = strings.TrimSpace(string(b))
		}
		if _, err := os.Stat(filepath.Join(c.tree, "bin", "srun")); err != nil {
			missing = "build/slurm/" + rel.name + " (make slurm-src-" + rel.name + ")"
		}
	}
	if missing == "" {
		if _, err := os.Stat(c.plugin); err != nil {
			missing = "its plugin (make " + rel.build + ")"
		}
	}
	if missing == "" {
		return c
	}
	if os.Getenv("CI") == "true" && why == "" && sourcesPresent(t, rel) {
		t.Fatalf("Slurm %s: %s is not built, and its sources are here", rel.name, missing)
	}
	if why != "" {
		t.Skipf("Slurm %s: %s is not built: %s", rel.name, missing, why)
	}
	t.Skipf("Slurm %s: %s is not built", rel.name, missing)
	return c
}

// sourcesPresent: Debian's releases come with make deps and from Debian's
// archive (an unreachable archive writes its reason, which need reads);
// SchedMD's from the resolver's cache or GPUSLICE_SOURCES.
func sourcesPresent(t *testing.T, rel release) bool {
	if rel.how != "source" {
		return true
	}
	return exec.Command(sourcesScript(t), "have", "slurm-"+rel.name).Run() == nil
}

// srunHelp runs the release's srun --help with a slurm.conf (no daemon is
// needed) whose plugstack.conf lists plugin as required.
func (c cluster) srunHelp(t *testing.T, plugin string) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs-slurmsrc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slurm.conf")
	stack := filepath.Join(dir, "plugstack.conf")
	body := fmt.Sprintf(`ClusterName=gsrel
SlurmctldHost=localhost
PluginDir=%s
PlugStackConfig=%s
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES
`, c.pluginDir, stack)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stack, []byte("required "+plugin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	switch c.rel.how {
	case "debian12":
		cmd = exec.Command("srun", "--help")
	case "debian13":
		cmd = exec.Command(filepath.Join(testenv.RepoRoot(t), "scripts", "trixie-root.sh"), "run", c.root, "srun", "--help")
		cmd.Env = append(os.Environ(),
			"TRIXIE_BINDS="+dir+":"+dir+":ro "+c.build+":"+c.build+":ro",
			"TRIXIE_ENV=SLURM_CONF="+conf)
	case "source":
		cmd = exec.Command(filepath.Join(c.tree, "bin", "srun"), "--help")
	}
	if cmd.Env == nil {
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF=" + conf}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Each release's own srun loads the plugin built for it, listed as
// required, and shows --gpu-mem.
func TestPluginLoadsInItsRelease(t *testing.T) {
	for _, rel := range releases(t) {
		t.Run(rel.name, func(t *testing.T) {
			c := need(t, rel)
			out, err := c.srunHelp(t, c.plugin)
			if err != nil {
				t.Fatalf("srun --help with %s required: %v\n%s", c.plugin, err, out)
			}
			if !strings.Contains(out, "--gpu-mem=SIZE") {
				t.Fatalf("srun --help with %s required does not show --gpu-mem:\n%s", c.plugin, out)
			}
		})
	}
}

// The loader the test above relies on checks the release: each srun
// refuses, and fails on, the plugin built for another release (22.05's;
// 22.05's own srun is given the plugin of a SchedMD release, since the one
// for 24.11 needs a newer C library than this machine's).
func TestOtherReleasePluginRefused(t *testing.T) {
	rels := releases(t)
	build := testenv.BuildDir(t)
	for _, rel := range rels {
		t.Run(rel.name, func(t *testing.T) {
			c := need(t, rel)
			other := rels[0]
			if rel.name == other.name {
				other = release{}
				for _, o := range rels {
					if _, err := os.Stat(filepath.Join(build, o.plugin)); o.how == "source" && err == nil {
						other = o
						break
					}
				}
				if other.name == "" {
					t.Skip("no plugin for a SchedMD release is built (make spank-RELEASE) to offer 22.05's srun")
				}
			}
			oc := need(t, other)
			out, err := c.srunHelp(t, oc.plugin)
			if err == nil {
				t.Fatalf("Slurm %s's srun --help with the plugin for %s required exited 0:\n%s", rel.name, other.name, out)
			}
			if !strings.Contains(out, "Incompatible Slurm plugin") {
				t.Fatalf("Slurm %s's srun --help with the plugin for %s: %v, and no 'Incompatible Slurm plugin':\n%s",
					rel.name, other.name, err, out)
			}
		})
	}
}

// From 25.05 the plugin declares that its failed init fails the job, not
// the node: slurm_spank_init_failure_mode is exported and holds that
// release's ESPANK_JOB_FAILURE. Releases before 25.05 have no such symbol,
// and the plugin built for them exports none.
func TestInitFailureMode(t *testing.T) {
	for _, rel := range releases(t) {
		t.Run(rel.name, func(t *testing.T) {
			c := need(t, rel)
			v, found := exportedInt(t, c.plugin, "slurm_spank_init_failure_mode")
			if !atLeast(t, rel.name, 25, 5) {
				if found {
					t.Fatalf("%s exports slurm_spank_init_failure_mode (%d), which Slurm %s does not know", c.plugin, v, rel.name)
				}
				return
			}
			if !found {
				t.Fatalf("%s does not export slurm_spank_init_failure_mode: a failed init would drain the node", c.plugin)
			}
			want := errnoValue(t, c.include, "ESPANK_JOB_FAILURE")
			if v != want {
				t.Fatalf("%s: slurm_spank_init_failure_mode = %d, want ESPANK_JOB_FAILURE (%d) of Slurm %s", c.plugin, v, want, rel.name)
			}
		})
	}
}

func atLeast(t *testing.T, rel string, major, minor int) bool {
	var a, b int
	if _, err := fmt.Sscanf(rel, "%d.%d", &a, &b); err != nil {
		t.Fatalf("release %q: %v", rel, err)
	}
	return a > major || (a == major && b >= minor)
}

// exportedInt reads the initial value of an exported int of a shared
// object, and whether it is exported.
func exportedInt(t *testing.T, path, name string) (int32, bool) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name || s.Section == elf.SHN_UNDEF {
			continue
		}
		if int(s.Section) >= len(f.Sections) || s.Size != 4 {
			t.Fatalf("%s: %s is not an int (section %d, size %d)", path, name, s.Section, s.Size)
		}
		sec := f.Sections[s.Section]
		data, err := sec.Data()
		if err != nil {
			t.Fatal(err)
		}
		off := s.Value - sec.Addr
		if sec.Type == elf.SHT_NOBITS {
			return 0, true
		}
		return int32(binary.LittleEndian.Uint32(data[off : off+4])), true
	}
	return 0, false
}

// errnoValue is the value of a Slurm error code in the release's
// slurm/slurm_errno.h, as its C compiler sees it.
func errnoValue(t *testing.T, include, name string) int32 {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "v.c")
	prog := fmt.Sprintf("#include <stdio.h>\n#include <slurm/slurm_errno.h>\nint main(void) { printf(\"%%d\\n\", (int)%s); return 0; }\n", name)
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "v")
	if out, err := exec.Command("gcc", "-I", include, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling a program printing %s against %s: %v\n%s", name, include, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return int32(v)
}
