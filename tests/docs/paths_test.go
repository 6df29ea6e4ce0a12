package docs

// docs/install.md gives one numbered path per platform. Each path is held
// to what the product is: its steps numbered 1..n in order and ending with
// Verify; every installed path it names installed by the gpuslice package
// (or Slurm's own); every make target it names listed by `make help`;
// every gpuslice command it names accepted by the built CLI; the
// slurm.conf lines it names exactly the shipped fragment's; the line it
// shows for the plugin the line `gpuslice slurm-plugin` prints. The steps
// that need no Slurm cluster (`gpuslice slurm-config`) are run as written
// on the fakecuda node of "Without a GPU", their output going where the
// step says (a private file here).

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/installdoc"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// platformPaths are install.md's headings of the platforms' paths.
var platformPaths = []string{"Debian and Ubuntu", "RHEL 9, Rocky, AlmaLinux", "Slurm built from source"}

// slurmOwned are the places of Slurm's own files (and the site's), which a
// step may name though no gpuslice package installs them.
var slurmOwned = []string{"/etc/slurm", "/usr/lib64/slurm", "/usr/lib/x86_64-linux-gnu/slurm-wlm",
	"/etc/systemd/system-preset", "/usr/local/etc", "/usr/local/lib/slurm"}

func isSlurmOwned(p string) bool {
	for _, d := range slurmOwned {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

var (
	reConfLine   = regexp.MustCompile(`^([A-Za-z]+)=(\S+)$`)
	reEnabled    = regexp.MustCompile(`^gpuslice: Slurm (\S+) \((/\S+)\): SPANK plugin for (\S+) enabled$`)
	reMakeCmd    = regexp.MustCompile(`^make ([a-z][a-z0-9.-]*)`)
	reGpuslice   = regexp.MustCompile(`(?:^|\s)gpuslice ([a-z-]+(?: --?[a-z-]+(?: [a-z0-9]+)?)*)`)
	reRedirect   = regexp.MustCompile(`\s*>>?\s*(\S+)$`)
	reHelpTarget = regexp.MustCompile(`(?m)^  (\S+)\s`)
)

func TestInstallPathsPerPlatform(t *testing.T) {
	root := testenv.RepoRoot(t)
	page := read(t, root, installPage)
	build, err := testenv.FindBuildDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	paths := loadPathMap(t, root, build)
	cli := filepath.Join(build, "bin", "gpuslice")
	if _, err := os.Stat(cli); err != nil {
		t.Skipf("%s is missing: run `make test-docs` (it builds go-build)", cli)
	}
	help, err := exec.Command("make", "-s", "-C", root, "help").Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	targets := map[string]bool{}
	for _, m := range reHelpTarget.FindAllStringSubmatch(string(help), -1) {
		targets[m[1]] = true
	}
	var fragment []string
	for _, l := range strings.Split(read(t, root, "etc/slurm/slurm.conf.fragment"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			fragment = append(fragment, l)
		}
	}
	for _, title := range platformPaths {
		t.Run(strings.Fields(title)[0], func(t *testing.T) {
			steps, err := installdoc.NumberedSteps(page, title)
			if err != nil {
				t.Fatalf("%s: %v", installPage, err)
			}
			if len(steps) < 5 {
				t.Fatalf("%s %q: %d numbered steps; a platform's path is a numbered list of at least 5", installPage, title, len(steps))
			}
			for i, s := range steps {
				if s.N != i+1 {
					t.Errorf("%s:%d: step numbered %d, want %d", installPage, s.Line, s.N, i+1)
				}
			}
			if last := steps[len(steps)-1]; !strings.Contains(last.Text, "(#verify)") {
				t.Errorf("%s:%d: the last step is not Verify", installPage, last.Line)
			}
			var conf []string
			for _, s := range steps {
				for _, c := range installdoc.CodeSpans(s.Text) {
					// Installed paths: the package's, or Slurm's own places.
					for _, m := range reInstalledPath.FindAllStringSubmatch(" "+c, -1) {
						p := strings.TrimRight(m[1], ".,")
						if isSlurmOwned(p) {
							continue
						}
						if l, ok := paths.local(p); !ok {
							t.Errorf("%s:%d: %q names %s, which no package installs", installPage, s.Line, c, p)
						} else if _, err := os.Stat(l); err != nil && !strings.Contains(l, "*") {
							t.Errorf("%s:%d: %q names %s, which the package would install from %s: %v", installPage, s.Line, c, p, l, err)
						}
					}
					if m := reMakeCmd.FindStringSubmatch(c); m != nil && !targets[m[1]] {
						t.Errorf("%s:%d: %q: `make help` lists no target %s", installPage, s.Line, c, m[1])
					}
					if m := reConfLine.FindStringSubmatch(c); m != nil {
						conf = append(conf, c)
					}
					if m := reEnabled.FindStringSubmatch(c); m != nil && m[1] != m[3] {
						t.Errorf("%s:%d: %q: the plugin enabled is another release's", installPage, s.Line, c)
					}
					if strings.Contains(c, "SPANK plugin") && !reEnabled.MatchString(c) {
						t.Errorf("%s:%d: %q is not the line gpuslice slurm-plugin prints", installPage, s.Line, c)
					}
					if m := reGpuslice.FindStringSubmatch(c); m != nil {
						args := append(strings.Fields(m[1]), "--help")
						if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
							t.Errorf("%s:%d: %q: the CLI refuses `gpuslice %s`: %v\n%s", installPage, s.Line, c, m[1], err, out)
						}
					}
				}
			}
			if len(conf) > 0 && strings.Join(conf, "\n") != strings.Join(fragment, "\n") {
				t.Errorf("%s %q: the slurm.conf lines %q are not the fragment's %q", installPage, title, conf, fragment)
			}
		})
	}
	// The Debian path names the slurm.conf lines one by one.
	steps, _ := installdoc.NumberedSteps(page, platformPaths[0])
	n := 0
	for _, s := range steps {
		for _, c := range installdoc.CodeSpans(s.Text) {
			if reConfLine.MatchString(c) {
				n++
			}
		}
	}
	if n == 0 {
		t.Errorf("%s %q names no slurm.conf line (the parser is broken?)", installPage, platformPaths[0])
	}
}

// TestInstallPathsSlurmConfigRuns runs each path's `gpuslice slurm-config`
// steps as written on the fakecuda node, their output going to a private
// file in place of the one the step names.
func TestInstallPathsSlurmConfigRuns(t *testing.T) {
	n := startDocNode(t)
	page := read(t, n.root, installPage)
	ran := 0
	for _, title := range platformPaths {
		steps, err := installdoc.NumberedSteps(page, title)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			for _, c := range installdoc.CodeSpans(s.Text) {
				if !strings.HasPrefix(c, "gpuslice slurm-config") {
					continue
				}
				ran++
				// The node's name is given (this machine's is not a
				// Slurm node's); the output goes to a private file.
				cmd, file := c+" --node tn1", ""
				if m := reRedirect.FindStringSubmatch(c); m != nil {
					file = filepath.Join(t.TempDir(), filepath.Base(m[1]))
					cmd = strings.TrimSuffix(c, m[0]) + " --node tn1 >>" + file
				}
				out, err := n.run(t, cmd, n.shellEnv())
				if err != nil {
					t.Errorf("%s:%d: %q on the fakecuda node: %v\n%s", installPage, s.Line, c, err, out)
					continue
				}
				if file != "" {
					b, _ := os.ReadFile(file)
					if !strings.Contains(string(b), "Name=shard") {
						t.Errorf("%s:%d: %q wrote no shard line to %s:\n%s", installPage, s.Line, c, file, b)
					}
				}
				if strings.Contains(c, "--print node") && !strings.Contains(out, "Gres=gpu:") {
					t.Errorf("%s:%d: %q prints no Gres=:\n%s", installPage, s.Line, c, out)
				}
			}
		}
	}
	if ran == 0 {
		t.Fatalf("%s: no gpuslice slurm-config step in any platform's path", installPage)
	}
}
