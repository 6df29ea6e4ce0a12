package packaging

// install.md's paths run in the Debian roots the build makes (make
// trixie-root, make bookworm-root), as installpath_test.go writes them:
// Debian's path in both, with their Slurm 24.11 and 22.05; the path for a
// Slurm built from source in the Debian 12 root with each of SchedMD's
// releases the suites run. Each run's output is held to what the page
// says it shows.

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// whereDebianNVIDIA is the directory Debian's nvidia-smi package puts the
// program in (build/nvidia, make nvidia-debs), "" when it is not there.
func whereDebianNVIDIA(build string) string {
	d := filepath.Join(build, "nvidia", "root", "usr", "lib", "nvidia", "current")
	if _, err := os.Stat(filepath.Join(d, "nvidia-smi")); err != nil {
		return ""
	}
	return d
}

// checkPath holds the run's output to what the page says it shows.
func checkPath(t *testing.T, out, version, release string) {
	t.Helper()
	got := map[string]string{}
	var allowed, denied int
	var total string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "fail=") {
			t.Errorf("%s", l)
		}
		low := strings.ToLower(l)
		if strings.Contains(low, "warning: apt does not have a stable cli interface") {
			continue // apt's own, to a pipe: the page's command is apt's
		}
		if strings.Contains(low, "warning") || strings.HasPrefix(low, "dpkg: error") || strings.HasPrefix(low, "e: ") {
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
			if k, v, ok := strings.Cut(l, "="); ok && (k == "installed" || k == "plugin" || k == "bad_gpu_mem" || k == "purged") {
				got[k] = v
			}
		}
	}
	if want := version + "-1"; got["installed"] != want {
		t.Errorf("installed version %q, want %q", got["installed"], want)
	}
	if want := "gpuslice/spank/" + release + "/gpuslice.so"; !strings.HasSuffix(got["plugin"], want) {
		t.Errorf("the plugin link in Slurm's PluginDir points to %q, want the plugin for %s (%s)", got["plugin"], release, want)
	}
	for _, want := range []string{
		"SPANK plugin for " + release + " enabled", // the package's or slurm-plugin's line
		"gpusliced: active (running)",              // Verify: systemctl status
		"--gpu-mem",                                // srun --help
		"Gres=gpu:2,shard:160K",                    // scontrol show node: two 80 GiB GPUs
		"JobSubmitPlugins        = lua",            // scontrol show config
		"2048 MiB",                                 // srun --gpu-mem=2G nvidia-smi --query-gpu=memory.total
		"1024MiB",                                  // gpuslice run --gpu-mem 1G -- nvidia-smi
		"purged=yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the run did not show %q", want)
		}
	}
	// "Without a GPU"'s job: 2 GiB, of which the context takes 300 MiB;
	// three steps of 512 MiB fit, the other five are refused.
	if total != strconv.Itoa(2<<30) || allowed != 3 || denied != 5 {
		t.Errorf("srun --gpu-mem=2G target_app --step 512M --count 8: total %q allowed %d denied %d, want 2 GiB, 3 and 5", total, allowed, denied)
	}
	if got["bad_gpu_mem"] != "invalid --gpu-mem '8X'" {
		t.Errorf("srun --gpu-mem=8X: %q, want the plugin's refusal", got["bad_gpu_mem"])
	}
}

// debianRoots are the Debian roots the build makes, with their Slurm.
var debianRoots = []struct{ name, dir, release string }{
	{"Debian 13", "trixie", "24.11"},
	{"Debian 12", "bookworm", "22.05"},
}

// The Debian path as written, in each root: the package installed with
// apt, which enables the plugin for the root's Slurm; the GPUs declared,
// the slurm.conf lines, job_submit.lua, the daemons restarted; every line
// of Verify; then a job of "Without a GPU" held to its quota as another
// user, a bad --gpu-mem refused at submit, and Remove's purge. A root is
// seen through an overlay: it stays as built. The GPUs are fakecuda's.
func TestDebianPathAsWritten(t *testing.T) {
	p := packages(t)
	page, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), installPage))
	if err != nil {
		t.Fatal(err)
	}
	script, err := nodeScript(string(page), "Debian and Ubuntu", p.Version)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range debianRoots {
		t.Run(r.name, func(t *testing.T) {
			if !slices.Contains(buildReleases(t), r.release) {
				t.Fatalf("the packages carry no plugin for Slurm %s (make spank-releases)", r.release)
			}
			out := runPathInRoot(t, p, r.dir, script, "")
			checkPath(t, out, p.Version, r.release)
			if want := "gpuslice: Slurm " + r.release + " (" + debPluginDir + "): SPANK plugin for " + r.release + " enabled"; !strings.Contains(out, want) {
				t.Errorf("apt install did not say %q", want)
			}
		})
	}
}

// runPathInRoot runs script (nodeScript's) in the Debian root build/dir
// (make trixie-root, make bookworm-root), seen through an overlay so that
// it stays as built, with the packages, testdata/install-node.sh and
// Debian's nvidia-smi bound in, bind ("HOST:GUEST:ro", or "") too and env
// given to the script; it returns what the run printed.
func runPathInRoot(t *testing.T, p pkgSet, dir, script, bind string, env ...string) string {
	t.Helper()
	build := testenv.BuildDir(t)
	repo := testenv.RepoRoot(t)
	if os.Geteuid() != 0 {
		t.Skip("running in a root needs root (chroot, mounts)")
	}
	top := filepath.Join(build, dir)
	if b, err := os.ReadFile(filepath.Join(top, "UNREACHABLE")); err == nil {
		t.Skipf("no %s root: %s", dir, strings.TrimSpace(string(b)))
	}
	if _, err := os.Stat(filepath.Join(top, ".stamp")); err != nil {
		t.Fatalf("no %s root in %s (make %s-root)", dir, top, dir)
	}
	smi := whereDebianNVIDIA(build)
	if smi == "" {
		t.Fatalf("no nvidia-smi from Debian's package in %s (make nvidia-debs): Verify runs it", build)
	}
	scripts := t.TempDir()
	if err := os.WriteFile(filepath.Join(scripts, "path.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	node, _, _ := strings.Cut(host, ".")
	ov, err := os.MkdirTemp(top, "pkgtest-")
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
	binds := filepath.Dir(p.Deb) + ":/mnt/gpuslice-dist:ro " + filepath.Join(repo, "tests", "packaging", "testdata") +
		":/mnt/gpuslice-test:ro " + scripts + ":/mnt/gpuslice-path:ro " + smi + ":/usr/lib/nvidia/current:ro"
	if bind != "" {
		binds += " " + bind
	}
	cmd := exec.Command(filepath.Join(repo, "scripts", "trixie-root.sh"), "run", filepath.Join(top, "root"),
		"/bin/bash", "/mnt/gpuslice-path/path.sh")
	cmd.Env = append(testenv.BaseEnv(),
		"TRIXIE_OVERLAY="+ov,
		"TRIXIE_BINDS="+binds,
		"TRIXIE_ENV="+strings.Join(append([]string{
			"FAKEDEB=/mnt/gpuslice-dist/" + filepath.Base(p.FakeDeb),
			"NODE=" + node, "CTLD_PORT=" + ports[0], "SLURMD_PORT=" + ports[1],
			"NVIDIA_SMI_DIR=/usr/lib/nvidia/current",
		}, env...), " "))
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	t.Logf("in the %s root:\n%s", dir, out)
	if err != nil {
		t.Fatalf("the path failed: %v", err)
	}
	return string(out)
}

// The path for a Slurm built from source, as written, in the Debian 12
// root, on each of SchedMD's releases the build has (make
// slurm-releases: those the Slurm suites run), each installed under
// /usr/local as SchedMD's defaults install it: the package from apt, the
// plugin selected with gpuslice slurm-plugin, and the rest as on Debian.
func TestSourcePathAsWritten(t *testing.T) {
	p := packages(t)
	build := testenv.BuildDir(t)
	repo := testenv.RepoRoot(t)
	page, err := os.ReadFile(filepath.Join(repo, installPage))
	if err != nil {
		t.Fatal(err)
	}
	script, err := nodeScript(string(page), "Slurm built from source", p.Version)
	if err != nil {
		t.Fatal(err)
	}
	trees, _ := filepath.Glob(filepath.Join(build, "slurm", "*", "BUILD-INFO"))
	if len(trees) == 0 {
		t.Fatalf("no Slurm built from source in %s (make slurm-releases)", filepath.Join(build, "slurm"))
	}
	for _, info := range trees {
		tree := filepath.Dir(info)
		release := filepath.Base(tree)
		t.Run(release, func(t *testing.T) {
			b, err := os.ReadFile(info)
			if err != nil {
				t.Fatal(err)
			}
			var prefix string
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "prefix "); ok {
					prefix = v
				}
			}
			if prefix == "" {
				t.Fatalf("%s names no prefix", info)
			}
			out := runPathInRoot(t, p, "bookworm", script, tree+":/mnt/slurm-tree:ro", "SLURM_TREE=/mnt/slurm-tree", "SLURM_PREFIX="+prefix)
			checkPath(t, out, p.Version, release)
		})
	}
}
