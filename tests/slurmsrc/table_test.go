// Package slurmsrc tests what make slurm-src and make spank-RELEASE build:
// each SchedMD Slurm release from its source, the SPANK plugin for every
// supported release loaded by that release's own srun, and the resolver
// that finds every third-party source (scripts/sources.sh).
package slurmsrc

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// source is one row of mk/sources.txt.
type source struct {
	Name, Version, Archive, SHA256, Content, URL string
}

// readSources parses a sources table: six blank-separated columns a row,
// '#' comments.
func readSources(t *testing.T, path string) []source {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []source
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := strings.Fields(line)
		if len(c) != 6 {
			t.Fatalf("%s:%d: %d columns, want 6 (name version archive sha256 content url)", path, n, len(c))
		}
		rows = append(rows, source{c[0], c[1], c[2], c[3], c[4], c[5]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func projectSources(t *testing.T) []source {
	return readSources(t, filepath.Join(testenv.RepoRoot(t), "mk", "sources.txt"))
}

var (
	hex64       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	slurmName   = regexp.MustCompile(`^slurm-(\d+\.\d+)$`)
	slurmVerRe  = regexp.MustCompile(`^(\d+\.\d+)\.\d+$`)
	commitRe    = regexp.MustCompile(`^[0-9a-f]{40}$`)
	githubURLRe = regexp.MustCompile(`^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/archive/`)
)

// The table every build and test reads: well formed, each Slurm row's
// version in its release, each archive named by its version, each URL the
// project's public archive of that tag or commit.
func TestSourcesTable(t *testing.T) {
	rows := projectSources(t)
	seen := map[string]bool{}
	slurms := 0
	for _, r := range rows {
		if seen[r.Name] {
			t.Errorf("%s: listed twice", r.Name)
		}
		seen[r.Name] = true
		if !hex64.MatchString(r.SHA256) || !hex64.MatchString(r.Content) {
			t.Errorf("%s: sha256 %q and content %q must be 64 hex digits", r.Name, r.SHA256, r.Content)
		}
		if !githubURLRe.MatchString(r.URL) {
			t.Errorf("%s: url %q is not a GitHub archive URL", r.Name, r.URL)
		}
		if m := slurmName.FindStringSubmatch(r.Name); m != nil {
			slurms++
			v := slurmVerRe.FindStringSubmatch(r.Version)
			if v == nil || v[1] != m[1] {
				t.Errorf("%s: version %q is not a %s release", r.Name, r.Version, m[1])
			}
			if r.Archive != "slurm-"+r.Version+".tar.xz" {
				t.Errorf("%s: archive %q, want slurm-%s.tar.xz", r.Name, r.Archive, r.Version)
			}
			tag := "slurm-" + strings.ReplaceAll(r.Version, ".", "-") + "-1"
			if !strings.HasSuffix(r.URL, "/refs/tags/"+tag+".tar.gz") {
				t.Errorf("%s: url %q is not the archive of tag %s", r.Name, r.URL, tag)
			}
			continue
		}
		if !commitRe.MatchString(r.Version) {
			t.Errorf("%s: version %q is not a commit", r.Name, r.Version)
		}
		if r.Archive != r.Name+"-"+r.Version+".tar.gz" || !strings.HasSuffix(r.URL, "/"+r.Version+".tar.gz") {
			t.Errorf("%s: archive %q or url %q does not name commit %s", r.Name, r.Archive, r.URL, r.Version)
		}
	}
	if slurms == 0 {
		t.Error("mk/sources.txt names no Slurm release")
	}
	for _, n := range []string{"enroot", "pyxis", "apptainer"} {
		if !seen[n] {
			t.Errorf("mk/sources.txt has no row for %s (mk/containers.mk builds it)", n)
		}
	}
}

// Each archive of the table that GPUSLICE_SOURCES holds is the pinned one
// (the resolver's `have` checks it against the directory's SHA256SUMS and
// the pin). Skipped when there is no such directory.
func TestSourcesDirectoryHoldsThePins(t *testing.T) {
	dir := sourcesDir(t)
	if dir == "" {
		t.Skip("no GPUSLICE_SOURCES and no shared/third_party beside the checkout")
	}
	for _, r := range projectSources(t) {
		if _, err := os.Stat(filepath.Join(dir, r.Archive)); err != nil {
			t.Logf("%s: %s is not in %s", r.Name, r.Archive, dir)
			continue
		}
		cmd := exec.Command(sourcesScript(t), "have", r.Name)
		cmd.Env = append(os.Environ(), "GPUSLICE_SOURCES="+dir, "GPUSLICE_CACHE="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v: %s", r.Name, err, out)
		}
	}
}

// sourcesDir is the directory scripts/sources.sh reads archives from.
func sourcesDir(t *testing.T) string {
	if d := os.Getenv("GPUSLICE_SOURCES"); d != "" {
		return d
	}
	d := filepath.Join(filepath.Dir(testenv.RepoRoot(t)), "shared", "third_party")
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

func sourcesScript(t *testing.T) string {
	return filepath.Join(testenv.RepoRoot(t), "scripts", "sources.sh")
}

// The Supported Slurm versions table of docs/slurm-releases.md has a row
// for each release mk/sources.txt pins, naming its version.
func TestDocsListEveryRelease(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "slurm-releases.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "# Supported Slurm versions")
	if i < 0 {
		t.Fatal("docs/slurm-releases.md has no 'Supported Slurm versions' heading")
	}
	section := doc[i:]
	for _, r := range projectSources(t) {
		if slurmName.MatchString(r.Name) && !strings.Contains(section, "| "+r.Version+" |") {
			t.Errorf("docs/slurm-releases.md, Supported Slurm versions: no row for %s", r.Version)
		}
	}
}
