package docs

// docs/flow.dot is the picture of the flow; docs/flow.svg, which the pages
// show, is rendered from it by `make docs-flow`. The source must render
// with Graphviz's dot (installed by `make deps`), and the committed SVG
// must hold the same nodes and edges as a fresh rendering: a picture
// changed in its source but not rendered again fails.

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// reSVGTitle is the title Graphviz gives each node, edge and cluster.
var reSVGTitle = regexp.MustCompile(`<title>([^<]*)</title>`)

// svgTitles returns the sorted titles of an SVG rendered by dot.
func svgTitles(svg string) []string {
	var out []string
	for _, m := range reSVGTitle.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

func TestFlowDiagramRenders(t *testing.T) {
	root := testenv.RepoRoot(t)
	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Fatalf("Graphviz's dot is not installed: run `make deps` (docs/flow.dot cannot be checked without it)")
	}
	cmd := exec.Command(dot, "-Tsvg", filepath.Join(root, "docs", "flow.dot"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("docs/flow.dot does not render (dot -Tsvg: %v):\n%s", err, errb.String())
	}
	fresh := svgTitles(out.String())
	if len(fresh) < 20 {
		t.Fatalf("docs/flow.dot renders only %d nodes, edges and clusters: not the flow", len(fresh))
	}
	committed := svgTitles(read(t, root, "docs/flow.svg"))
	if strings.Join(fresh, "\n") != strings.Join(committed, "\n") {
		t.Errorf("docs/flow.svg is not docs/flow.dot's rendering (nodes and edges differ): run `make docs-flow`\nfresh:     %q\ncommitted: %q",
			fresh, committed)
	}
	// The pages show the rendering.
	if !strings.Contains(read(t, root, "docs/flow.md"), "](flow.svg)") {
		t.Errorf("docs/flow.md does not show flow.svg")
	}
}
