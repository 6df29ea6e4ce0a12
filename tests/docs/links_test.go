// Package docs checks that the documentation matches the product: every
// relative link in README.md and docs/ resolves in the source tree, and —
// for the pages the package ships — among the installed files of the
// gpuslice package (packaging/nfpm/gpuslice.yaml), anchors included.
package docs

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"go.yaml.in/yaml/v3"
)

var reLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links returns the link targets of a Markdown page outside code.
func links(md string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		// Drop inline code spans.
		parts := strings.Split(line, "`")
		var text strings.Builder
		for i, p := range parts {
			if i%2 == 0 {
				text.WriteString(p)
			}
		}
		for _, m := range reLink.FindAllStringSubmatch(text.String(), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors returns the GitHub anchors of a page's headings.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func isExternal(l string) bool {
	return strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:")
}

// pages are README.md and docs/*.md, relative to the repository root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	ps, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(ps) == 0 {
		t.Fatalf("no docs/*.md under %s", root)
	}
	out := []string{"README.md"}
	for _, p := range ps {
		out = append(out, "docs/"+filepath.Base(p))
	}
	return out
}

func read(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkAnchor fails when frag names no heading of the Markdown page rel.
func checkAnchor(t *testing.T, root, from, link, rel, frag string) {
	t.Helper()
	if frag == "" || !strings.HasSuffix(rel, ".md") {
		return
	}
	if !anchors(read(t, root, rel))[frag] {
		t.Errorf("%s: link %q: %s has no heading #%s", from, link, rel, frag)
	}
}

func TestLinksResolveInTree(t *testing.T) {
	root := testenv.RepoRoot(t)
	n := 0
	for _, page := range pages(t, root) {
		for _, l := range links(read(t, root, page)) {
			if isExternal(l) {
				continue
			}
			n++
			target, frag, _ := strings.Cut(l, "#")
			rel := page
			if target != "" {
				rel = path.Clean(path.Join(path.Dir(page), target))
			}
			if strings.HasPrefix(rel, "../") {
				t.Errorf("%s: link %q leaves the repository", page, l)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
				t.Errorf("%s: link %q: %s does not exist", page, l, rel)
				continue
			}
			checkAnchor(t, root, page, l, rel, frag)
		}
	}
	if n < 10 {
		t.Fatalf("only %d relative links found: the link parser is broken", n)
	}
}

// nfpmConfig is the part of an nfpm configuration the test reads.
type nfpmConfig struct {
	Contents []struct {
		Src      string `yaml:"src"`
		Dst      string `yaml:"dst"`
		Type     string `yaml:"type"`
		Packager string `yaml:"packager"`
	} `yaml:"contents"`
}

// installed maps, per packager, each installed path to the repository file
// it comes from ("" for build outputs and generated files).
func installed(t *testing.T, root string) map[string]map[string]string {
	t.Helper()
	var cfg nfpmConfig
	if err := yaml.Unmarshal([]byte(read(t, root, "packaging/nfpm/gpuslice.yaml")), &cfg); err != nil {
		t.Fatalf("packaging/nfpm/gpuslice.yaml: %v", err)
	}
	out := map[string]map[string]string{"deb": {}, "rpm": {}}
	for _, c := range cfg.Contents {
		if c.Dst == "" || c.Type == "dir" {
			continue
		}
		for pkg, files := range out {
			if c.Packager != "" && c.Packager != pkg {
				continue
			}
			if c.Src == "" || strings.Contains(c.Src, "$") {
				files[c.Dst] = ""
				continue
			}
			srcs, _ := filepath.Glob(filepath.Join(root, c.Src))
			if len(srcs) == 0 {
				t.Errorf("gpuslice.yaml: %s matches no file", c.Src)
			}
			for _, s := range srcs {
				rel, _ := filepath.Rel(root, s)
				dst := c.Dst
				if strings.HasSuffix(dst, "/") {
					dst += filepath.Base(s)
				}
				files[path.Clean(dst)] = filepath.ToSlash(rel)
			}
		}
	}
	return out
}

func TestPackageShipsWhatDocsLinkTo(t *testing.T) {
	root := testenv.RepoRoot(t)
	for pkg, files := range installed(t, root) {
		shipped := map[string]string{} // repository file -> installed path
		for dst, src := range files {
			if src != "" {
				shipped[src] = dst
			}
		}
		for _, page := range pages(t, root) {
			if page == "README.md" {
				continue
			}
			if _, ok := shipped[page]; !ok {
				t.Errorf("%s package: %s is not shipped", pkg, page)
			}
		}
		for _, page := range pages(t, root) {
			dst, isShipped := shipped[page]
			for _, l := range links(read(t, root, page)) {
				target, _, _ := strings.Cut(l, "#")
				if isExternal(l) || target == "" {
					continue
				}
				rel := path.Clean(path.Join(path.Dir(page), target))
				if !isShipped {
					// README is not installed: the docs pages it points
					// to must be.
					if strings.HasPrefix(rel, "docs/") {
						if _, ok := shipped[rel]; !ok {
							t.Errorf("%s package: %s links to %s, which is not shipped", pkg, page, rel)
						}
					}
					continue
				}
				inst := path.Clean(path.Join(path.Dir(dst), target))
				src, ok := files[inst]
				switch {
				case !ok:
					t.Errorf("%s package: installed %s links to %q: %s is not in the package", pkg, dst, l, inst)
				case src != rel:
					t.Errorf("%s package: installed %s links to %q: %s is %q there, not %s", pkg, dst, l, inst, src, rel)
				}
			}
		}
	}
}

// TestBuildWithoutDepsSaysMakeDeps: on a machine without the build
// dependencies `make build` stops with one line naming `make deps`.
func TestBuildWithoutDepsSaysMakeDeps(t *testing.T) {
	root := testenv.RepoRoot(t)
	for _, missing := range []string{"BUILD_HEADERS=/nonexistent/slurm/spank.h", "CC=/nonexistent/gcc"} {
		cmd := exec.Command("make", "-n", "build", missing)
		cmd.Dir = root
		// As typed in a shell, not as a sub-make of `make test-docs`.
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		text := strings.TrimSpace(string(out))
		if err == nil || strings.Count(text, "\n") != 0 || !strings.Contains(text, "run 'make deps'") {
			t.Errorf("make build %s: err %v, output (want one line naming make deps):\n%s", missing, err, text)
		}
	}
}
