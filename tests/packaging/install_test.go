package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// makeInstall runs `make install` with the given variables and returns its
// output. The environment of an enclosing make (jobserver) is dropped.
func makeInstall(t *testing.T, vars ...string) string {
	t.Helper()
	root := testenv.RepoRoot(t)
	args := append([]string{"--no-print-directory", "-C", root, "install", "BUILD=" + testenv.BuildDir(t)}, vars...)
	cmd := exec.Command("make", args...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "MAKEFLAGS" || k == "MFLAGS" || k == "MAKELEVEL" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestMakeInstall(t *testing.T) {
	need(t, "make")
	p := packages(t) // for the version the build carries
	destdir := t.TempDir()
	makeInstall(t, "PREFIX=/usr/local", "DESTDIR="+destdir)

	want := map[string]os.FileMode{
		"/usr/local/sbin/gpusliced":                                    0o755,
		"/usr/local/bin/gpuslice":                                      0o755,
		"/usr/local/libexec/gpuslice/gpuslice-prolog":                  0o755,
		"/usr/local/libexec/gpuslice/gpuslice-epilog":                  0o755,
		"/usr/local/libexec/gpuslice/gpuslice-ctxprobe":                0o755,
		"/usr/local/lib/gpuslice/libgpuslice.so":                       0o644,
		"/usr/local/lib/slurm/gpuslice.so":                             0o644,
		"/usr/local/lib/systemd/system/gpusliced.service":              0o644,
		"/usr/local/etc/gpuslice/gpusliced.yaml":                       0o644,
		"/usr/local/etc/slurm/plugstack.conf.d/gpuslice.conf":          0o644,
		"/usr/local/share/gpuslice/monitoring/gpuslice-alerts.yml":     0o644,
		"/usr/local/share/gpuslice/monitoring/gpuslice-dashboard.json": 0o644,
		"/usr/local/share/gpuslice/job_submit.lua":                     0o644,
		"/usr/local/etc/enroot/hooks.d/50-gpuslice.sh":                 0o755,
		"/usr/local/share/gpuslice/apptainer/gpuslice.conf":            0o644,
		"/usr/local/share/gpuslice/apptainer/ld.so.preload":            0o644,
		"/usr/local/share/gpuslice/apptainer/taskprolog.sh":            0o755,
		"/usr/local/share/doc/gpuslice/slurm.conf.fragment":            0o644,
		"/usr/local/share/man/man1/gpuslice.1":                         0o644,
		"/usr/local/share/man/man8/gpusliced.8":                        0o644,
	}
	pages, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	pictures, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.svg"))
	for _, p := range append(pages, pictures...) {
		want["/usr/local/share/doc/gpuslice/"+filepath.Base(p)] = 0o644
	}
	got := map[string]os.FileMode{}
	err := filepath.Walk(destdir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			got[strings.TrimPrefix(path, destdir)] = info.Mode()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, mode := range want {
		if gm, ok := got[path]; !ok {
			t.Errorf("missing %s", path)
		} else if gm != mode {
			t.Errorf("%s: mode %v, want %v", path, gm, mode)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("unexpected file %s", path)
		}
	}

	t.Run("paths rewritten for PREFIX", func(t *testing.T) {
		unit := readFile(t, filepath.Join(destdir, "usr/local/lib/systemd/system/gpusliced.service"))
		if !strings.Contains(unit, "ExecStart=/usr/local/sbin/gpusliced --config /usr/local/etc/gpuslice/gpusliced.yaml") {
			t.Errorf("unit's ExecStart not rewritten for /usr/local:\n%s", unit)
		}
		plugstack := readFile(t, filepath.Join(destdir, "usr/local/etc/slurm/plugstack.conf.d/gpuslice.conf"))
		if !regexp.MustCompile(`(?m)^(required|optional)\s+/usr/local/lib/slurm/gpuslice\.so\b`).MatchString(plugstack) {
			t.Errorf("plugstack snippet does not name the installed plugin /usr/local/lib/slurm/gpuslice.so:\n%s", plugstack)
		}
		for _, f := range []string{
			"usr/local/lib/systemd/system/gpusliced.service",
			"usr/local/etc/gpuslice/gpusliced.yaml",
			"usr/local/etc/slurm/plugstack.conf.d/gpuslice.conf",
			"usr/local/share/doc/gpuslice/slurm.conf.fragment",
			"usr/local/etc/enroot/hooks.d/50-gpuslice.sh",
			"usr/local/share/gpuslice/apptainer/gpuslice.conf",
			"usr/local/share/gpuslice/apptainer/ld.so.preload",
			"usr/local/share/gpuslice/apptainer/taskprolog.sh",
		} {
			// Hide the rewritten /usr/local/etc/... so that /etc/... below
			// only matches paths that were left alone.
			s := strings.ReplaceAll(readFile(t, filepath.Join(destdir, f)), "/usr/local/etc/", "@/")
			for _, packaged := range []string{"/usr/sbin/gpusliced", "/usr/lib/gpuslice/", "/usr/libexec/gpuslice/",
				"/etc/gpuslice/", "/etc/slurm/", debPluginDir + "/", "/usr/lib64/slurm/", "= /usr/lib/gpuslice\n", "/usr/lib/gpuslice:",
				"/usr/share/gpuslice/"} {
				if strings.Contains(s, packaged) {
					t.Errorf("%s still names the packaged path %s", f, packaged)
				}
			}
		}
	})

	t.Run("installed programs report the version", func(t *testing.T) {
		for _, prog := range []string{"usr/local/sbin/gpusliced", "usr/local/bin/gpuslice",
			"usr/local/libexec/gpuslice/gpuslice-prolog", "usr/local/libexec/gpuslice/gpuslice-epilog"} {
			out := run(t, nil, filepath.Join(destdir, prog), "--version")
			if !strings.Contains(out, p.Version) {
				t.Errorf("%s --version: %q, want %s", prog, strings.TrimSpace(out), p.Version)
			}
		}
	})

	t.Run("reinstall keeps edited configuration", func(t *testing.T) {
		conf := filepath.Join(destdir, "usr/local/etc/gpuslice/gpusliced.yaml")
		edited := readFile(t, conf) + "\n# edited by the site\n"
		if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		out := makeInstall(t, "PREFIX=/usr/local", "DESTDIR="+destdir)
		if got := readFile(t, conf); got != edited {
			t.Errorf("make install replaced the edited configuration")
		}
		if !strings.Contains(out, "keeping existing") {
			t.Errorf("make install did not say it kept the configuration:\n%s", out)
		}
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
